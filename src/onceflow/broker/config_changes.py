"""What a topic's config overrides become under AlterConfigs (33) or IncrementalAlterConfigs (44).

Pure functions over the override map (name -> value; a name absent means the default): the handlers
check the resource, call one of these, then hand the result to ``TopicManager.alter_topic_configs``,
which validates the values and applies them. Kafka's rules (``ConfigAdminManager``):

- AlterConfigs replaces the whole set: names not in the request go back to their defaults.
- IncrementalAlterConfigs applies SET / DELETE (back to the default) / APPEND / SUBTRACT per name;
  APPEND and SUBTRACT are for list configs only (``cleanup.policy`` here), on comma-separated items.
- A name given twice in one resource, an unknown operation, or SET/APPEND/SUBTRACT without a value is
  INVALID_REQUEST; APPEND/SUBTRACT on a non-list config is INVALID_CONFIG.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from onceflow.protocol.errors import InvalidConfig, InvalidRequest

OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}


def _check_unique(names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidRequest(f"Error due to duplicate config keys: {name}")
        seen.add(name)


def replaced_overrides(entries: Iterable[tuple[str, str | None]]) -> dict[str, str]:
    """AlterConfigs: the request's (name, value) pairs are the new overrides; a null value leaves the
    name at its default."""
    pairs = list(entries)
    _check_unique([name for name, _ in pairs])
    return {name: value for name, value in pairs if value is not None}


def incremental_overrides(
    current: Mapping[str, str],
    operations: Iterable[tuple[str, int, str | None]],
    defaults: Mapping[str, str],
    list_configs: frozenset[str],
) -> dict[str, str]:
    """IncrementalAlterConfigs: ``operations`` as (name, operation, value) applied to ``current``.
    ``defaults`` gives a list config's value when it has no override (APPEND/SUBTRACT start there)."""
    ops = list(operations)
    _check_unique([name for name, _, _ in ops])
    result = dict(current)
    for name, op, value in ops:
        if op not in _OP_NAMES:
            raise InvalidRequest(f"Unknown config operation {op} for config key: {name}")
        if op == OP_DELETE:
            result.pop(name, None)
            continue
        if value is None:
            raise InvalidRequest(f"Null value not supported for {_OP_NAMES[op]} of config key: {name}")
        if op == OP_SET:
            result[name] = value
            continue
        if name not in list_configs:
            verb = "append" if op == OP_APPEND else "subtract"
            raise InvalidConfig(f"Config value {verb} is not allowed for config key: {name}")
        items = _items(result.get(name, defaults.get(name, "")))
        changes = _items(value)
        if op == OP_APPEND:
            items += [item for item in changes if item not in items]
        else:
            items = [item for item in items if item not in changes]
        result[name] = ",".join(items)
    return result


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]
