"""``ClientQuotas``: the quota settings, and the throttle time each request earns, as Kafka's
ClientQuotaManager and ClientRequestQuotaManager compute them.

Which quota applies to a (user, client-id) is Kafka's precedence, most specific first::

    user + client-id, user + <default> client-id, user,
    <default> user + client-id, <default> user + <default> client-id, <default> user,
    client-id, <default> client-id

and who shares a rate sensor follows from the entity that matched: a quota on a user alone is shared
by all that user's client-ids, a quota on a client-id (or the default client-id) is measured for each
client-id on its own. Each quota key has its own settings, precedence and sensors: a client can have a
producer byte rate from its client-id and a request percentage from its user.

The user is the name of the connection's principal (``alice`` for ``User:alice``, authenticated by
SASL or a client certificate; ``ANONYMOUS`` on a listener without authentication), as Kafka's quota
user entity is.

Throttle times: a byte rate's throttle is what brings its rate back to the quota over the sample
windows (``sampled_rate``); a request percentage's is the same, capped at one window (Kafka caps it
so). The caller records the value (bytes produced or fetched, or the percent of a thread's time spent
on the request) and gets the time the client must be silent. Sensors of clients that stayed silent
for an hour are dropped, as Kafka expires them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from onceflow.broker.quotas.entities import (
    CLIENT_ID,
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    QUOTA_KEYS,
    REQUEST_PERCENTAGE,
    USER,
    Entity,
    Filter,
    describe_entity,
)
from onceflow.broker.quotas.store import QuotaStore
from onceflow.broker.sampled_rate import SampledRate, record_and_throttle_time_ms

log = logging.getLogger(__name__)

ANONYMOUS = "ANONYMOUS"  # the user of connections that did not authenticate
SENSOR_EXPIRY_MS = 3_600_000  # Kafka's inactive quota sensor expiration
_SWEEP_INTERVAL_MS = 60_000
_MAX_CACHED_LIMITS = 10_000
ENFORCED_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)

# (user tag, client-id tag): "" where the matched entity does not name that type (Kafka's metric tags)
_Tags = tuple[str, str]


def _e(*pairs: tuple[str, str | None]) -> Entity:
    return tuple(sorted(pairs))


class ClientQuotas:
    """Quota settings (loaded from and saved to ``store``) and the rate sensors they throttle with."""

    def __init__(self, store: QuotaStore, *, window_num: int = 11, window_size_ms: int = 1000) -> None:
        self._store = store
        self.window_num = window_num
        self.window_size_ms = window_size_ms
        self._quotas: dict[Entity, dict[str, float]] = store.load()
        self._sensors: dict[tuple[str, str, str], SampledRate] = {}
        self._limits: dict[tuple[str, str, str], tuple[_Tags, float | None]] = {}
        self._next_sweep_ms = 0
        self._reindex()

    # -- settings ------------------------------------------------------------------------------------

    def _reindex(self) -> None:
        self._entities_with: dict[str, dict[Entity, float]] = {key: {} for key in QUOTA_KEYS}
        for quota_entity, values in self._quotas.items():
            for key, value in values.items():
                self._entities_with[key][quota_entity] = value
        self._limits.clear()
        # Whether requests must go through the quota path at all (controller_mutation_rate is stored,
        # not enforced).
        self.any_enabled = any(self._entities_with[key] for key in ENFORCED_KEYS)

    def replace(self, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
        """Take ``quotas`` as the whole set (a cluster broker: the metadata image's client quotas,
        which the controller decides)."""
        self._quotas = {quota_entity: dict(values) for quota_entity, values in quotas.items()}
        self._reindex()

    def enabled(self, key: str) -> bool:
        """Whether any entity has a ``key`` quota (nothing to record otherwise)."""
        return bool(self._entities_with[key])

    def alter(
        self, changes: Iterable[tuple[Entity, dict[str, float | None]]], *, validate_only: bool
    ) -> None:
        """Apply checked changes (``{key: value, or None to remove}`` per entity) and save them all,
        before returning; raises OSError if they could not be saved (then nothing changed)."""
        changes = list(changes)
        updated = {quota_entity: dict(values) for quota_entity, values in self._quotas.items()}
        for quota_entity, ops in changes:
            values = updated.setdefault(quota_entity, {})
            for key, value in ops.items():
                if value is None:
                    values.pop(key, None)
                else:
                    values[key] = value
            if not values:
                del updated[quota_entity]
        if validate_only or updated == self._quotas:
            return
        self._store.save(updated)  # durable before it takes effect or is acknowledged
        for quota_entity, _ops in changes:
            log.info("client quotas of %s: %s", describe_entity(quota_entity), updated.get(quota_entity, {}))
        self._quotas = updated
        self._reindex()

    def describe(self, quota_filter: Filter) -> list[tuple[Entity, dict[str, float]]]:
        return [
            (quota_entity, dict(values))
            for quota_entity, values in sorted(self._quotas.items(), key=lambda item: str(item[0]))
            if quota_filter.matches(quota_entity)
        ]

    # -- which quota a client gets ----------------------------------------------------------------------

    def _tags(self, key: str, user: str, client_id: str) -> _Tags:
        has = self._entities_with[key]
        u, c = (USER, user), (CLIENT_ID, client_id)
        default_u, default_c = (USER, None), (CLIENT_ID, None)
        if _e(u, c) in has or _e(u, default_c) in has:
            return user, client_id
        if _e(u) in has:
            return user, ""
        if _e(default_u, c) in has or _e(default_u, default_c) in has:
            return user, client_id
        if _e(default_u) in has:
            return user, ""
        return "", client_id

    def _bound(self, key: str, tags: _Tags) -> float | None:
        has = self._entities_with[key]
        user, client_id = tags
        u, c = (USER, user), (CLIENT_ID, client_id)
        default_u, default_c = (USER, None), (CLIENT_ID, None)
        if user and client_id:
            candidates = (_e(u, c), _e(u, default_c), _e(default_u, c), _e(default_u, default_c))
        elif user:
            candidates = (_e(u), _e(default_u))
        elif client_id:
            candidates = (_e(c), _e(default_c))
        else:
            candidates = ()
        for candidate in candidates:
            if candidate in has:
                return has[candidate]
        return None

    def quota_for(self, key: str, user: str, client_id: str) -> tuple[_Tags, float | None]:
        """The sensor tags and the quota (None: no quota) of ``key`` for this client."""
        cache_key = (key, user, client_id)
        cached = self._limits.get(cache_key)
        if cached is None:
            if len(self._limits) >= _MAX_CACHED_LIMITS:
                self._limits.clear()  # many client-ids: start afresh rather than grow
            tags = self._tags(key, user, client_id)
            cached = self._limits[cache_key] = (tags, self._bound(key, tags))
        return cached

    # -- throttling -------------------------------------------------------------------------------------

    def record(self, key: str, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` (bytes, or percent-seconds of a thread for request_percentage) for this
        client and return the throttle time (ms) it earned; 0 without a quota."""
        if not self._entities_with[key]:
            return 0
        tags, bound = self.quota_for(key, user, client_id)
        if bound is None:
            return 0
        if now_ms >= self._next_sweep_ms:
            self._sweep(now_ms)
        sensor_key = (key, *tags)
        rate = self._sensors.get(sensor_key)
        if rate is None:
            rate = self._sensors[sensor_key] = SampledRate(self.window_num, self.window_size_ms)
        throttle_ms = record_and_throttle_time_ms(rate, value, bound, now_ms)
        if key == REQUEST_PERCENTAGE:
            throttle_ms = min(throttle_ms, self.window_size_ms)
        return throttle_ms

    def _sweep(self, now_ms: int) -> None:
        self._next_sweep_ms = now_ms + _SWEEP_INTERVAL_MS
        idle = [
            sensor_key
            for sensor_key, rate in self._sensors.items()
            if now_ms - (rate.idle_since_ms() or now_ms) > SENSOR_EXPIRY_MS
        ]
        for sensor_key in idle:
            del self._sensors[sensor_key]
