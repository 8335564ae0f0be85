"""Where client quotas persist. ``QuotaStore`` is the seam: the broker loads every quota at start and
saves the whole set after each accepted AlterClientQuotas, before answering it, so an acknowledged
change survives a crash. Today's store is one JSON file in the data dir, replaced atomically (written
aside, fsynced, renamed); the cluster work will keep them as ClientQuotaRecords in the metadata log
behind the same two calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from onceflow.broker.quotas.entities import Entity, check_value, entity
from onceflow.log.durable_file import write_atomically

FILE_NAME = "client-quotas.json"
FORMAT_VERSION = 1

Quotas = Mapping[Entity, Mapping[str, float]]


class QuotaStore(Protocol):
    def load(self) -> dict[Entity, dict[str, float]]: ...

    def save(self, quotas: Quotas) -> None: ...


class FileQuotaStore:
    """``<data-dir>/client-quotas.json``: ``{"version": 1, "quotas": [{"entity": [[type, name|null],
    ...], "values": {key: value}}, ...]}``."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE_NAME

    def load(self) -> dict[Entity, dict[str, float]]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            document = json.loads(text)
            if document.get("version") != FORMAT_VERSION:
                raise ValueError(f"unknown format version {document.get('version')!r}")
            quotas: dict[Entity, dict[str, float]] = {}
            for item in document["quotas"]:
                values = {str(k): float(v) for k, v in item["values"].items()}
                for key, value in values.items():
                    check_value(key, value)
                quotas[entity((str(t), n if n is None else str(n)) for t, n in item["entity"])] = values
        except Exception as exc:  # any damage: say which file, refuse to start with quotas half-known
            raise ValueError(f"{self.path} is damaged ({exc}); fix or remove it") from None
        return quotas

    def save(self, quotas: Quotas) -> None:
        document = {
            "version": FORMAT_VERSION,
            "quotas": [
                {"entity": [list(pair) for pair in quota_entity], "values": dict(values)}
                for quota_entity, values in sorted(quotas.items(), key=lambda item: _sort_key(item[0]))
                if values
            ],
        }
        write_atomically(self.path, json.dumps(document, indent=1) + "\n")


def _sort_key(quota_entity: Entity) -> tuple:
    return tuple((t, n is not None, n or "") for t, n in quota_entity)
