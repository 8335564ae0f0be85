"""Committed offsets of every group, and transactional commits waiting for their marker.

Pure data, changed only by the coordinator's replay of ``__consumer_offsets``. A transactional offset
commit (TxnOffsetCommit) is held per producer id in ``pending`` and becomes visible only when
:meth:`OffsetStore.complete_txn` sees the producer's commit marker; an abort marker drops it.
``require_stable`` fetches see such partitions as unstable.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

TopicPartition = tuple[str, int]


@dataclasses.dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int = -1


class OffsetStore:
    def __init__(self) -> None:
        self._committed: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        # producer id -> group -> partition -> offset, not yet visible.
        self._pending: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = {}

    # -- committed ---------------------------------------------------------------------------

    def put(self, group_id: str, tp: TopicPartition, value: CommittedOffset) -> None:
        self._committed.setdefault(group_id, {})[tp] = value

    def remove(self, group_id: str, tp: TopicPartition) -> bool:
        offsets = self._committed.get(group_id)
        if not offsets or tp not in offsets:
            return False
        del offsets[tp]
        if not offsets:
            del self._committed[group_id]
        return True

    def remove_group(self, group_id: str) -> list[TopicPartition]:
        """Forget a group's offsets, committed and pending; returns the committed partitions."""
        for groups in self._pending.values():
            groups.pop(group_id, None)
        return list(self._committed.pop(group_id, {}))

    def get(self, group_id: str, tp: TopicPartition) -> CommittedOffset | None:
        return self._committed.get(group_id, {}).get(tp)

    def all_for(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return dict(self._committed.get(group_id, {}))

    def has_offsets(self, group_id: str) -> bool:
        return bool(self._committed.get(group_id)) or self.has_pending(group_id)

    def group_ids(self) -> set[str]:
        return set(self._committed) | {g for groups in self._pending.values() for g in groups}

    # -- transactional (pending until the marker) --------------------------------------------

    def put_pending(
        self, producer_id: int, group_id: str, tp: TopicPartition, value: CommittedOffset
    ) -> None:
        self._pending.setdefault(producer_id, {}).setdefault(group_id, {})[tp] = value

    def has_pending(self, group_id: str, tp: TopicPartition | None = None) -> bool:
        for groups in self._pending.values():
            offsets = groups.get(group_id)
            if offsets and (tp is None or tp in offsets):
                return True
        return False

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """The partitions of the group with a pending offset of any producer."""
        return {tp for groups in self._pending.values() for tp in groups.get(group_id, {})}

    def remove_pending(self, group_id: str, tp: TopicPartition) -> None:
        """Drop every producer's pending offset of ``tp`` in the group (its partition was deleted)."""
        for groups in self._pending.values():
            offsets = groups.get(group_id)
            if offsets is not None:
                offsets.pop(tp, None)

    def complete_txn(self, producer_id: int, commit: bool) -> list[tuple[str, TopicPartition]]:
        """Apply (commit) or drop (abort) a producer's pending offsets; returns what became visible."""
        groups = self._pending.pop(producer_id, {})
        made_visible = []
        if commit:
            for group_id, offsets in groups.items():
                for tp, value in offsets.items():
                    self.put(group_id, tp, value)
                    made_visible.append((group_id, tp))
        return made_visible

    def pending_offsets(self) -> dict[int, dict[str, dict[TopicPartition, CommittedOffset]]]:
        """Every pending offset: producer id -> group -> partition -> offset (a copy)."""
        return {pid: {g: dict(tps) for g, tps in groups.items()} for pid, groups in self._pending.items()}

    def pending_producers(self) -> Iterable[int]:
        return list(self._pending)
