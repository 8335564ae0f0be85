"""Incremental fetch sessions (KIP-227): the broker's session cache and the per-request fetch contexts.

Sans-IO: no sockets, no clock (callers pass ``now_ms``), no event loop, so every rule here is tested
directly. The Fetch handler asks ``FetchSessionCache.new_context(request, now_ms)`` for a context
before it reads anything, reads the partitions ``context.partitions`` names (in that order), and
hands the results to ``context.respond(results, now_ms)``, which says what to answer. Kafka's
``FetchManager.newContext`` and ``FetchContext`` classes are the reference:

- epoch 0 (``INITIAL_EPOCH``) or -1 (``FINAL_EPOCH``) is a full fetch: any session the request names
  is closed first; epoch 0 then creates a new session when the cache has room (the answer carries
  its id; the client's next fetch uses epoch 1), epoch -1 never does (the answer carries id 0, as
  every Fetch below v7 does);
- any other epoch is incremental: the session must exist (else FETCH_SESSION_ID_NOT_FOUND), be at
  exactly that epoch (else INVALID_FETCH_SESSION_EPOCH) and use topic ids iff the request does (v13+;
  else FETCH_SESSION_TOPIC_ID_ERROR); these errors answer at once, with session id 0 and no
  partitions. The request's partitions are added to the session or replace its cached request data,
  ``forgotten_topics_data`` leaves it, the epoch moves on, and the fetch reads every partition of
  the session. A session left empty is closed and the request served sessionless;
- an incremental answer lists only the partitions with something to say (``CachedPartition.
  must_respond``); a partition that returned records moves to the end of the session, so the next
  fetch reads the others first (KIP-74's limits then share the bytes fairly);
- the session's epoch is checked again when answering: if another request of the same session
  (a duplicate) moved it on meanwhile, this one gets INVALID_FETCH_SESSION_EPOCH.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions. When it is full a
new session may evict, as Kafka's ``FetchSessionCache.tryEvict``: first the least recently used
session if it has been idle longer than ``min.incremental.fetch.session.eviction.ms``; else the
least valuable evictable session (ordered by privileged, size, id) if the new one is worth at least
as much (so a consumer's session never evicts a follower's by size). A session becomes evictable by
size once it is used more than the eviction time after its creation; before that a consumer's
session may give way only to a follower's (privileged) one, and a follower's to none. With no room
the full fetch is still answered, with session id 0.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from onceflow.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

INVALID_SESSION_ID = 0  # "no session": full fetches that created none, and sessionless answers
INITIAL_EPOCH = 0  # a full fetch that asks for a new session
FINAL_EPOCH = -1  # a full fetch that wants no session (and every Fetch below v7)
MAX_EPOCH = 2**31 - 1
_MAX_SESSION_ID = 2**31 - 1  # ids are drawn from [1, 2^31 - 1), as Kafka's newSessionId


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``: 1 after MAX_EPOCH (0 means "full fetch"), -1 stays -1."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == MAX_EPOCH:
        return 1
    return epoch + 1


# A partition of a session: (topic name, partition) in a session of Fetch v7-12, (topic id,
# partition) in one of v13+, where requests name topics by id only.
PartitionKey = tuple[str | uuid.UUID, int]


class PartitionRequest(NamedTuple):
    """What a Fetch request asks of one partition (kept by a session between requests)."""

    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # the fetching follower's, -1 from consumers


class SessionRequest(NamedTuple):
    """The session side of one Fetch request."""

    session_id: int
    epoch: int
    uses_topic_ids: bool  # Fetch v13+
    privileged: bool  # from a follower (replica id >= 0)
    partitions: dict[PartitionKey, PartitionRequest]  # in request order
    forgotten: Sequence[PartitionKey] = ()


# ---------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: its latest request data and what the fetcher was last told."""

    request: PartitionRequest
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_respond(self, data: Any, *, update: bool) -> bool:
        """Whether an incremental answer must list this partition, given its freshly read ``data``
        (a Fetch response's PartitionData); with ``update``, remember what it now tells the fetcher.

        Kafka's rule (``CachedPartition.maybeUpdateResponseData``): records, a high watermark or log
        start offset other than last sent, a preferred read replica, or an error. An error also
        forgets the high watermark, so the partition is listed again once the error is gone. Beyond
        Kafka's rule, a changed last stable offset and a non-empty aborted-transaction list also
        make a partition listed (here both move only with the others, so this costs nothing; it
        guarantees read_committed never loses either).
        """
        respond = bool(data.records) or bool(data.aborted_transactions)
        if data.high_watermark != self.high_watermark:
            respond = True
            if update:
                self.high_watermark = data.high_watermark
        if data.last_stable_offset != self.last_stable_offset:
            respond = True
            if update:
                self.last_stable_offset = data.last_stable_offset
        if data.log_start_offset != self.log_start_offset:
            respond = True
            if update:
                self.log_start_offset = data.log_start_offset
        if data.preferred_read_replica >= 0:
            respond = True
        if data.error_code:
            respond = True
            if update:
                self.high_watermark = -1
        return respond


@dataclass(eq=False, slots=True)
class FetchSession:
    """One incremental fetch session. ``epoch`` is the epoch the next request must carry."""

    id: int
    privileged: bool
    uses_topic_ids: bool
    creation_ms: int
    last_used_ms: int
    epoch: int
    partitions: dict[PartitionKey, CachedPartition]  # ordered: the order fetches read them in
    # Set by FetchSessionCache.touch: the size counted in the cache, and who may evict it by size.
    cached_size: int = -1
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False

    def update(
        self, partitions: dict[PartitionKey, PartitionRequest], forgotten: Iterable[PartitionKey]
    ) -> tuple[list[PartitionKey], list[PartitionKey], list[PartitionKey]]:
        """Apply an incremental request: new partitions join at the end, known ones take the new
        request data, forgotten ones leave. Returns (added, updated, removed)."""
        added, updated, removed = [], [], []
        for key, request in partitions.items():
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(request)
                added.append(key)
            else:
                cached.request = request
                updated.append(key)
        for key in forgotten:
            if self.partitions.pop(key, None) is not None:
                removed.append(key)
        return added, updated, removed

    def eviction_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)


# ---------------------------------------------------------------------------------------------------
# Fetch contexts: what one request reads and how its answer is made.

Results = list[tuple[PartitionKey, Any]]  # (partition, its Fetch response PartitionData), in order


class FetchAnswer(NamedTuple):
    error_code: ErrorCode
    session_id: int
    partitions: Results


class SessionErrorContext:
    """The request's session metadata was refused: nothing is read, the error is the answer."""

    def __init__(self, error: ErrorCode) -> None:
        self.error = error
        self.partitions: list[tuple[PartitionKey, PartitionRequest]] = []

    def respond(self, results: Results, now_ms: int) -> FetchAnswer:
        return FetchAnswer(self.error, INVALID_SESSION_ID, [])


class SessionlessContext:
    """A full fetch that creates no session (epoch -1, Fetch < v7, or a session just emptied)."""

    error = ErrorCode.NONE

    def __init__(self, partitions: dict[PartitionKey, PartitionRequest]) -> None:
        self.partitions = list(partitions.items())

    def respond(self, results: Results, now_ms: int) -> FetchAnswer:
        return FetchAnswer(ErrorCode.NONE, INVALID_SESSION_ID, results)


class FullFetchContext:
    """A full fetch at epoch 0: every partition is answered, and a session is created if there is room."""

    error = ErrorCode.NONE

    def __init__(self, cache: FetchSessionCache, request: SessionRequest) -> None:
        self._cache = cache
        self._request = request
        self.partitions = list(request.partitions.items())

    def respond(self, results: Results, now_ms: int) -> FetchAnswer:
        cached: dict[PartitionKey, CachedPartition] = {}
        for key, data in results:
            cached[key] = CachedPartition(
                self._request.partitions[key],
                high_watermark=data.high_watermark,
                last_stable_offset=data.last_stable_offset,
                log_start_offset=data.log_start_offset,
            )
        session_id = self._cache.maybe_create(
            now_ms, self._request.privileged, self._request.uses_topic_ids, cached
        )
        return FetchAnswer(ErrorCode.NONE, session_id, results)


class IncrementalFetchContext:
    """An incremental fetch in ``session``, whose epoch has already moved past the request's."""

    error = ErrorCode.NONE

    def __init__(self, session: FetchSession, request_epoch: int) -> None:
        self._session = session
        self._expected_epoch = next_epoch(request_epoch)
        self.partitions = [(key, cached.request) for key, cached in session.partitions.items()]

    def respond(self, results: Results, now_ms: int) -> FetchAnswer:
        session = self._session
        if session.epoch != self._expected_epoch:
            log.info(
                "fetch session %d is at epoch %d, not %d: a duplicate request?",
                session.id,
                session.epoch,
                self._expected_epoch,
            )
            return FetchAnswer(ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, [])
        listed: Results = []
        for key, data in results:
            cached = session.partitions.get(key)
            if cached is None or not cached.must_respond(data, update=True):
                continue
            listed.append((key, data))
            if data.records:
                # Read last next time, so partitions that had no data this time get the bytes first.
                del session.partitions[key]
                session.partitions[key] = cached
        return FetchAnswer(ErrorCode.NONE, session.id, listed)


FetchContext = SessionErrorContext | SessionlessContext | FullFetchContext | IncrementalFetchContext


# ---------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class FetchSessionStats:
    """Counters for tests and logs (Kafka's fetch-session metrics, plus what kind of fetches came)."""

    full_fetches: int = 0  # epoch 0
    sessionless_fetches: int = 0  # epoch -1 / Fetch < v7
    incremental_fetches: int = 0  # served in a session
    session_errors: int = 0  # FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, topic-id mismatch
    sessions_created: int = 0
    evictions: int = 0


class FetchSessionCache:
    """The broker's fetch sessions: at most ``max_slots`` of them (0 disables sessions)."""

    def __init__(
        self,
        max_slots: int = 1000,  # max.incremental.fetch.session.cache.slots
        eviction_ms: int = 120000,  # min.incremental.fetch.session.eviction.ms
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.stats = FetchSessionStats()
        self._rng = rng or random.Random()
        self._sessions: dict[int, FetchSession] = {}
        self._total_partitions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def total_partitions(self) -> int:
        """Partitions cached over all sessions (Kafka's NumIncrementalFetchPartitionsCached)."""
        return self._total_partitions

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def new_context(self, request: SessionRequest, now_ms: int) -> FetchContext:
        """The context of one Fetch request (Kafka's ``FetchManager.newContext``); an incremental
        request updates its session (partitions, epoch, last use) here, before anything is read."""
        if request.epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if request.session_id != INVALID_SESSION_ID:
                self.remove(request.session_id)  # a full fetch closes the session it names
            if request.epoch == FINAL_EPOCH:
                self.stats.sessionless_fetches += 1
                return SessionlessContext(request.partitions)
            self.stats.full_fetches += 1
            return FullFetchContext(self, request)
        session = self._sessions.get(request.session_id)
        error = ErrorCode.NONE
        if session is None:
            error = ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        elif session.epoch != request.epoch:
            error = ErrorCode.INVALID_FETCH_SESSION_EPOCH
        elif session.uses_topic_ids != request.uses_topic_ids:
            error = ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR
        if session is None or error:
            log.debug("fetch session %d epoch %d refused: %s", request.session_id, request.epoch, error.name)
            self.stats.session_errors += 1
            return SessionErrorContext(error)
        session.update(request.partitions, request.forgotten)
        if not session.partitions:
            self.remove(session.id)
            self.stats.sessionless_fetches += 1
            return SessionlessContext(request.partitions)
        self.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        self.stats.incremental_fetches += 1
        return IncrementalFetchContext(session, request.epoch)

    def maybe_create(
        self,
        now_ms: int,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: dict[PartitionKey, CachedPartition],
    ) -> int:
        """A new session holding ``partitions`` if there is room (or room can be made by eviction):
        its id, else INVALID_SESSION_ID."""
        if len(self._sessions) >= self.max_slots and not self._try_evict(privileged, len(partitions), now_ms):
            log.debug("no fetch session created (privileged=%s, %d partitions)", privileged, len(partitions))
            return INVALID_SESSION_ID
        session = FetchSession(
            id=self._new_session_id(),
            privileged=privileged,
            uses_topic_ids=uses_topic_ids,
            creation_ms=now_ms,
            last_used_ms=now_ms,
            epoch=next_epoch(INITIAL_EPOCH),
            partitions=partitions,
        )
        self._sessions[session.id] = session
        self.touch(session, now_ms)
        self.stats.sessions_created += 1
        log.debug("created fetch session %d with %d partitions", session.id, len(partitions))
        return session.id

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._total_partitions -= session.cached_size
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """Mark ``session`` used now, and recount its size and who may evict it (Kafka decides both
        here, not at eviction time)."""
        session.last_used_ms = now_ms
        if session.cached_size >= 0:
            self._total_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        self._total_partitions += session.cached_size
        old_enough = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_all = old_enough
        session.evictable_by_privileged = old_enough or not session.privileged

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self._sessions:
            return False
        least_recent = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - least_recent.last_used_ms > self.eviction_ms:
            log.debug("evicting stale fetch session %d", least_recent.id)
            return self._evict(least_recent)
        candidates = [
            s
            for s in self._sessions.values()
            if (s.evictable_by_privileged if privileged else s.evictable_by_all)
        ]
        if not candidates:
            return False
        victim = min(candidates, key=FetchSession.eviction_key)
        if (privileged, size, 0) < victim.eviction_key():
            return False  # the new session is worth less than the cheapest evictable one
        log.debug(
            "evicting fetch session %d (%d partitions) for a new one of %d",
            victim.id,
            victim.cached_size,
            size,
        )
        return self._evict(victim)

    def _evict(self, session: FetchSession) -> bool:
        self.remove(session.id)
        self.stats.evictions += 1
        return True

    def _new_session_id(self) -> int:
        while True:
            session_id = self._rng.randrange(1, _MAX_SESSION_ID)
            if session_id not in self._sessions:
                return session_id
