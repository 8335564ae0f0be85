"""Brokers joining, living and leaving: BrokerRegistration (62), BrokerHeartbeat (63),
UnregisterBroker (64) and session expiry (Kafka's ``ClusterControlManager`` and the broker half of
``ReplicationControlManager``).

A broker's life, as the controller sees it:

- **register**: a RegisterBrokerRecord, fenced, whose offset becomes the broker epoch. The same node
  id with another incarnation id is refused (DUPLICATE_BROKER_REGISTRATION) while the old one's
  session lives; once it has expired, the new incarnation replaces the old one, and (unlike Kafka
  before KIP-966) the old incarnation first leaves every ISR and leadership, so no partition keeps a
  leader that restarted with a possibly shorter log. The same incarnation registering again (a lost
  response) keeps its epoch and state.
- **unfence**: its heartbeat reports a metadata offset at or past its own registration (it has
  caught up): a BrokerRegistrationChangeRecord(fenced=-1), and it leads the partitions left without
  a leader where it is in the ISR.
- **controlled shutdown**: ``WantShutDown`` while it leads partitions: in_controlled_shutdown=1, it
  leaves every ISR and its leaderships move to other ISR members; once it leads nothing and every
  active broker has replayed up to those records, the controller says ``ShouldShutDown`` and fences
  it. With no leaderships it may stop at once (fenced).
- **expiry**: no heartbeat for ``broker.session.timeout.ms``: fenced, out of every ISR, leaderships
  moved (one broker per operation, as Kafka, so each fencing sees the previous one).
- **unregister**: out of every ISR and leadership, then an UnregisterBrokerRecord.
"""

from __future__ import annotations

import enum

from onceflow.controller.config import ControllerConfig
from onceflow.controller.elections import has_leaderships, isr_updates
from onceflow.controller.sessions import BrokerSessions
from onceflow.metadata.image import METADATA_VERSION, MetadataImage
from onceflow.metadata.records import (
    FENCE,
    IN_CONTROLLED_SHUTDOWN,
    UNFENCE,
    BrokerEndpoint,
    BrokerFeature,
    BrokerRegistrationChangeRecord,
    RegisterBrokerRecord,
    UnregisterBrokerRecord,
)
from onceflow.protocol.errors import ErrorCode, KafkaError
from onceflow.protocol.messages import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)

# Kafka assumes a broker that names no metadata.version range supports only the first KRaft level.
MINIMUM_KRAFT_METADATA_VERSION = 1


class BrokerState(enum.Enum):
    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"


def check_broker_epoch(image: MetadataImage, broker_id: int, epoch: int) -> None:
    broker = image.broker(broker_id)
    if broker is None:
        raise KafkaError(
            f"No broker registration found for broker id {broker_id}", ErrorCode.STALE_BROKER_EPOCH
        )
    if broker.epoch != epoch:
        raise KafkaError(
            f"Expected broker epoch {broker.epoch}, but got broker epoch {epoch}",
            ErrorCode.STALE_BROKER_EPOCH,
        )


def _check_features(image: MetadataImage, request: BrokerRegistrationRequest) -> tuple[BrokerFeature, ...]:
    offered = {f.name: (f.min_supported_version, f.max_supported_version) for f in request.features}
    offered.setdefault(METADATA_VERSION, (MINIMUM_KRAFT_METADATA_VERSION, MINIMUM_KRAFT_METADATA_VERSION))
    for name, level in image.features.items():
        low, high = offered.get(name, (0, 0))
        if level != 0 and not low <= level <= high:
            raise KafkaError(
                f"Unable to register because the broker does not support finalized version {level} of {name}. "
                f"The broker wants a version between {low} and {high}, inclusive.",
                ErrorCode.UNSUPPORTED_VERSION,
            )
    return tuple(
        BrokerFeature(name=name, min_supported_version=low, max_supported_version=high)
        for name, (low, high) in sorted(offered.items())
    )


def register_broker(
    image: MetadataImage,
    config: ControllerConfig,
    sessions: BrokerSessions,
    request: BrokerRegistrationRequest,
    next_offset: int,
    now_ms: int,
) -> tuple[list, BrokerRegistrationResponse]:
    """The records of a registration; raises KafkaError with Kafka's code when it is refused."""
    if config.cluster_id is not None and request.cluster_id != config.cluster_id:
        raise KafkaError(
            f"Expected cluster ID {config.cluster_id}, but got cluster ID {request.cluster_id}",
            ErrorCode.INCONSISTENT_CLUSTER_ID,
        )
    if getattr(request, "is_migrating_zk_broker", False):
        raise KafkaError(
            "Controller does not support registering ZK brokers.", ErrorCode.BROKER_ID_NOT_REGISTERED
        )
    broker_id = request.broker_id
    existing = image.broker(broker_id)
    same_incarnation = existing is not None and existing.incarnation_id == request.incarnation_id
    if existing is not None and not same_incarnation and sessions.has_valid_session(broker_id, now_ms):
        raise KafkaError(
            "Another broker is registered with that broker id.", ErrorCode.DUPLICATE_BROKER_REGISTRATION
        )
    features = _check_features(image, request)
    records: list = []
    if existing is not None and not same_incarnation:
        # the old incarnation may still lead or sit in ISRs: take it out before replacing it
        records.extend(
            isr_updates(image, remove=broker_id, unclean_default=config.unclean_leader_election_enable)
        )
    endpoints = tuple(
        BrokerEndpoint(name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol)
        for e in request.listeners
    )
    if same_incarnation:
        epoch, fenced, shutting_down = existing.epoch, existing.fenced, existing.in_controlled_shutdown
    else:
        epoch, fenced, shutting_down = next_offset + len(records), True, False
    records.append(
        RegisterBrokerRecord(
            broker_id=broker_id,
            incarnation_id=request.incarnation_id,
            broker_epoch=epoch,
            end_points=endpoints,
            features=features,
            rack=request.rack,
            fenced=fenced,
            in_controlled_shutdown=shutting_down,
        )
    )
    if not same_incarnation:
        sessions.remove(broker_id)
    sessions.register(broker_id, fenced, now_ms)
    return records, BrokerRegistrationResponse(throttle_time_ms=0, error_code=0, broker_epoch=epoch)


def fence_records(image: MetadataImage, config: ControllerConfig, broker_id: int) -> list:
    """``broker_id`` out of every ISR and leadership, then fenced."""
    broker = image.broker(broker_id)
    records: list = isr_updates(
        image, remove=broker_id, unclean_default=config.unclean_leader_election_enable
    )
    records.append(
        BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker.epoch, fenced=FENCE)
    )
    return records


def _next_state(
    image: MetadataImage, sessions: BrokerSessions, request: BrokerHeartbeatRequest, register_offset: int
) -> tuple[BrokerState, BrokerState]:
    broker_id = request.broker_id
    session = sessions.get(broker_id)
    broker = image.broker(broker_id)
    if session.shutting_down or broker.in_controlled_shutdown:
        current = BrokerState.CONTROLLED_SHUTDOWN
    elif broker.fenced:
        current = BrokerState.FENCED
    else:
        current = BrokerState.UNFENCED
    if current is BrokerState.FENCED:
        if request.want_shut_down:
            return current, BrokerState.SHUTDOWN_NOW
        if not request.want_fence and request.current_metadata_offset >= register_offset:
            return current, BrokerState.UNFENCED
        return current, BrokerState.FENCED
    if current is BrokerState.UNFENCED:
        if request.want_fence:
            return current, BrokerState.SHUTDOWN_NOW if request.want_shut_down else BrokerState.FENCED
        if request.want_shut_down:
            if has_leaderships(image, broker_id):
                return current, BrokerState.CONTROLLED_SHUTDOWN
            return current, BrokerState.SHUTDOWN_NOW
        return current, BrokerState.UNFENCED
    # in controlled shutdown: done once it leads nothing and every active broker has caught up
    if has_leaderships(image, broker_id):
        return current, BrokerState.CONTROLLED_SHUTDOWN
    lowest = sessions.lowest_active_offset()
    if (
        session.controlled_shutdown_offset < 0
        or lowest is None
        or session.controlled_shutdown_offset <= lowest
    ):
        return current, BrokerState.SHUTDOWN_NOW
    return current, BrokerState.CONTROLLED_SHUTDOWN


def broker_heartbeat(
    image: MetadataImage,
    config: ControllerConfig,
    sessions: BrokerSessions,
    request: BrokerHeartbeatRequest,
    now_ms: int,
) -> tuple[list, BrokerHeartbeatResponse, BrokerState]:
    """The records of a heartbeat, the answer, and the state it leaves the broker in (the caller
    records where a controlled shutdown began once it knows the records' offset)."""
    check_broker_epoch(image, request.broker_id, request.broker_epoch)
    broker_id = request.broker_id
    broker = image.broker(broker_id)
    if sessions.get(broker_id) is None:
        sessions.register(broker_id, broker.fenced, now_ms)
    register_offset = broker.epoch
    current, following = _next_state(image, sessions, request, register_offset)
    records: list = []
    if current is not following:
        if following in (BrokerState.FENCED, BrokerState.SHUTDOWN_NOW):
            if not broker.fenced:
                records = fence_records(image, config, broker_id)
        elif following is BrokerState.UNFENCED:
            records = [
                BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker.epoch, fenced=UNFENCE)
            ]
            # it may lead what has no leader (it counts as active although the image says fenced)
            records.extend(
                isr_updates(
                    image,
                    add=broker_id,
                    only_leaderless=True,
                    unclean_default=config.unclean_leader_election_enable,
                )
            )
        elif following is BrokerState.CONTROLLED_SHUTDOWN:
            if not broker.in_controlled_shutdown:
                records.append(
                    BrokerRegistrationChangeRecord(
                        broker_id=broker_id,
                        broker_epoch=broker.epoch,
                        in_controlled_shutdown=IN_CONTROLLED_SHUTDOWN,
                    )
                )
            records.extend(
                isr_updates(image, remove=broker_id, unclean_default=config.unclean_leader_election_enable)
            )
    fenced = following in (BrokerState.FENCED, BrokerState.SHUTDOWN_NOW)
    sessions.touch(broker_id, fenced, request.current_metadata_offset, now_ms)
    response = BrokerHeartbeatResponse(
        throttle_time_ms=0,
        error_code=0,
        is_caught_up=request.current_metadata_offset >= register_offset,
        is_fenced=fenced,
        should_shut_down=following is BrokerState.SHUTDOWN_NOW,
    )
    return records, response, following


def unregister_broker(
    image: MetadataImage, config: ControllerConfig, sessions: BrokerSessions, broker_id: int
) -> list:
    broker = image.broker(broker_id)
    if broker is None:
        raise KafkaError(
            f"Broker ID {broker_id} is not currently registered", ErrorCode.BROKER_ID_NOT_REGISTERED
        )
    records: list = isr_updates(
        image, remove=broker_id, unclean_default=config.unclean_leader_election_enable
    )
    records.append(UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=broker.epoch))
    sessions.remove(broker_id)
    return records
