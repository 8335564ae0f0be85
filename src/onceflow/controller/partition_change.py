"""One partition's next state, as a PartitionChangeRecord (Kafka's ``PartitionChangeBuilder``).

Every leadership or ISR change the controller makes goes through :func:`partition_change`: a broker
fenced or shutting down leaves the ISR and its leaderships, a broker unfenced takes the partitions
left without a leader, AlterPartition installs a leader's new ISR, ElectLeaders and the periodic
rebalance move leadership back to the preferred replica.

The election rules are Kafka's:

- the current leader stays if it is still acceptable and in the target ISR (ONLINE and UNCLEAN);
- otherwise the first replica, in assignment order, that is in the target ISR and acceptable;
- PREFERRED tries the first replica of the assignment before anything else;
- UNCLEAN (``unclean.leader.election.enable``) falls back to the first acceptable replica outside
  the ISR: the ISR becomes that replica alone and the partition is marked RECOVERING (KIP-704);
- with no candidate the partition is left without a leader (leader -1) and its ISR unchanged:
  the ISR is never emptied, so the last in-sync replica is elected again when it comes back.

At ``metadata.version`` 3.6-IV0 and later a shrinking ISR no longer bumps the leader epoch
(KAFKA-15021); the leader epoch grows only when the leader field is written.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Sequence

from onceflow.metadata.image import PartitionRegistration
from onceflow.metadata.records import NO_LEADER, NO_LEADER_CHANGE, RECOVERING, PartitionChangeRecord


class Election(enum.Enum):
    PREFERRED = "preferred"
    ONLINE = "online"
    UNCLEAN = "unclean"


def elect_leader(
    partition: PartitionRegistration,
    target_isr: Sequence[int],
    acceptable: Callable[[int], bool],
    election: Election,
) -> tuple[int, bool]:
    """(new leader or NO_LEADER, whether the election was unclean)."""

    def valid(replica: int) -> bool:
        return replica in target_isr and acceptable(replica)

    replicas = partition.replicas
    if election is Election.PREFERRED and replicas and valid(replicas[0]):
        return replicas[0], False
    if partition.leader != NO_LEADER and valid(partition.leader):
        return partition.leader, False
    for replica in replicas:
        if valid(replica):
            return replica, False
    if election is Election.UNCLEAN:
        for replica in replicas:
            if acceptable(replica):
                return replica, True
    return NO_LEADER, False


def partition_change(
    partition: PartitionRegistration,
    topic_id: uuid.UUID,
    partition_id: int,
    acceptable: Callable[[int], bool],
    *,
    target_isr: Sequence[int] | None = None,
    election: Election = Election.ONLINE,
    target_recovery_state: int | None = None,
) -> PartitionChangeRecord | None:
    """The record that takes ``partition`` to its target ISR with a leader elected by ``election``
    among replicas ``acceptable`` says may lead; None if nothing would change."""
    isr = tuple(partition.isr if target_isr is None else target_isr)
    leader, unclean = elect_leader(partition, isr, acceptable, election)
    new_leader = NO_LEADER_CHANGE
    new_isr: tuple[int, ...] | None = None
    recovery = -1
    if leader != partition.leader:
        new_leader = leader
        if unclean:
            # Only the new leader can be trusted to be in sync; it may lack committed records.
            new_isr = (leader,)
            if partition.leader_recovery_state != RECOVERING:
                recovery = RECOVERING
    if new_isr is None and isr and isr != partition.isr:
        new_isr = isr
    if (
        target_recovery_state is not None
        and target_recovery_state != partition.leader_recovery_state
        and recovery == -1
    ):
        recovery = target_recovery_state
    if new_leader == NO_LEADER_CHANGE and new_isr is None and recovery == -1:
        return None
    return PartitionChangeRecord(
        partition_id=partition_id,
        topic_id=topic_id,
        isr=new_isr,
        leader=new_leader,
        leader_recovery_state=recovery,
    )
