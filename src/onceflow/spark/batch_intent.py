"""The batch-atomic sink's intent: the driver's decision to commit one micro-batch, kept durably in
the query's checkpoint directory before any of the batch's transactions is completed.

One file per batch, ``<checkpoint>/onceflow-sink/intents/<batch id>``, holds the batch's intent:
every task's transactional id with the :class:`~onceflow.client.producer.PreparedTxnState` (as text)
its task prepared, when the intent was taken, and, once all of them are completed, when that was. A
file is written whole (a temporary file, fsync, rename, fsync of the directory), so a crash leaves
the previous content or the new one, never a torn file. The driver's commit creates the file only if
the batch has none (:meth:`IntentLog.create`): of two drivers on one checkpoint, one decides a batch. Only the last batch's intent can be
unfinished: a batch begins only after the previous batch's commit returned, and that commit completed
every transaction of its intent first. Older files are removed beyond :data:`INTENTS_KEPT` (as
Spark keeps its own logs for a while).

Also here: where the checkpoint is (Spark hands the sink ``checkpointLocation``, a local path or a
``file:`` URI) and the streaming query's id, which Spark keeps in ``<checkpoint>/metadata``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

__all__ = ["BatchIntent", "IntentLog", "checkpoint_path", "query_id_of"]

INTENT_DIR = "onceflow-sink/intents"
INTENTS_KEPT = 100


@dataclass(frozen=True)
class BatchIntent:
    batch_id: int
    transactions: dict[str, str] = field(default_factory=dict)  # transactional id -> prepared state
    decided_ms: int = 0  # when the intent was taken (wall clock, ms; durable a write later)
    completed_ms: int | None = None  # when every transaction was completed
    batch_end_ms: int = 0  # when the driver's commit began: every task had prepared and reported
    tasks_ended_ms: int = 0  # when the batch's last task prepared its transaction

    @property
    def completed(self) -> bool:
        return self.completed_ms is not None

    def to_json(self) -> str:
        return json.dumps(
            {
                "batch": self.batch_id,
                "transactions": self.transactions,
                "decided_ms": self.decided_ms,
                "completed_ms": self.completed_ms,
                "batch_end_ms": self.batch_end_ms,
                "tasks_ended_ms": self.tasks_ended_ms,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> BatchIntent:
        data = json.loads(text)
        return cls(
            int(data["batch"]),
            dict(data["transactions"]),
            data["decided_ms"],
            data["completed_ms"],
            data.get("batch_end_ms", 0),
            data.get("tasks_ended_ms", 0),
        )


def checkpoint_path(location: str) -> Path:
    """The local directory of Spark's ``checkpointLocation``; ValueError for a non-local one."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path) if parsed.scheme else location)
    if len(parsed.scheme) == 1:  # a Windows drive letter, not a scheme
        return Path(location)
    raise ValueError(
        f"guarantee=exactly-once-atomic keeps each batch's intent in the checkpoint directory, which "
        f"must be a local (or locally mounted) path; {location!r} is not"
    )


def query_id_of(checkpoint: Path) -> str | None:
    """The streaming query's id, from the ``metadata`` file Spark writes in a checkpoint (None when
    Spark has not written it)."""
    try:
        first_line = (checkpoint / "metadata").read_text().splitlines()[0]
        return str(json.loads(first_line)["id"])
    except (OSError, IndexError, ValueError, KeyError):
        return None


class IntentLog:
    def __init__(self, checkpoint: Path) -> None:
        self.directory = checkpoint / INTENT_DIR

    def batch_ids(self) -> list[int]:
        try:
            return sorted(int(p.name) for p in self.directory.iterdir() if p.name.isdigit())
        except FileNotFoundError:
            return []

    def read(self, batch_id: int | None = None) -> BatchIntent | None:
        """Batch ``batch_id``'s intent (None: the last batch's), or None when there is none."""
        if batch_id is None:
            ids = self.batch_ids()
            if not ids:
                return None
            batch_id = ids[-1]
        try:
            return BatchIntent.from_json((self.directory / str(batch_id)).read_text())
        except FileNotFoundError:
            return None

    def write(self, intent: BatchIntent, *, durable: bool = True) -> None:
        """Durably write the batch's intent: once this returns, a crash cannot lose it. Not
        ``durable``: written whole, without waiting for the disk (the mark that an intent was
        completed: a crash that loses it makes the next driver complete the intent again, which is
        harmless)."""
        self._write(intent, exclusive=False, durable=durable)

    def create(self, intent: BatchIntent) -> BatchIntent | None:
        """Durably write the batch's intent unless the batch has one already; returns that one then
        (None when this one was written). Two drivers on one checkpoint cannot both take batch N's
        decision: the file appears once (a hard link of the written temporary file, which fails when
        the name exists), whichever driver links first."""
        return self._write(intent, exclusive=True)

    def withdraw(self, intent: BatchIntent) -> None:
        """Remove batch ``intent.batch_id``'s intent if it is still ``intent`` (a fenced driver takes
        back a decision it could not carry out, so that the driver that fenced it can take its own)."""
        if self.read(intent.batch_id) == intent:
            (self.directory / str(intent.batch_id)).unlink(missing_ok=True)
            self._sync_directory()

    def _write(self, intent: BatchIntent, *, exclusive: bool, durable: bool = True) -> BatchIntent | None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / str(intent.batch_id)
        tmp = self.directory / f".{intent.batch_id}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(intent.to_json())
            f.flush()
            if durable:
                os.fsync(f.fileno())
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return self.read(intent.batch_id)
            finally:
                tmp.unlink(missing_ok=True)
        else:
            os.replace(tmp, path)
        if durable:
            self._sync_directory()
        for old in self.batch_ids()[:-INTENTS_KEPT]:
            (self.directory / str(old)).unlink(missing_ok=True)
        return None

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
