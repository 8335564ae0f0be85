"""Producer ids that never repeat, also across restarts.

Ids are handed out from blocks (Kafka's ``ProducerIdsBlock``, 1000 ids by default). Before the first id
of a new block is handed out, the block's end is written to a small file in the data dir
(``log.durable_file.write_atomically``: temp file, fsync, rename, fsync the directory), so a crash at
any point can only skip ids, never repeat one: on start we resume after the persisted end.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from onceflow.broker.txn.errors import ProducerIdsExhausted
from onceflow.log.durable_file import write_atomically

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_FILE = "producer-id-block.json"
DEFAULT_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MAX_PRODUCER_ID = 2**63 - 1
_FORMAT_VERSION = 1


class ProducerIdManager:
    """Hands out producer ids for InitProducerId (idempotent and transactional alike)."""

    def __init__(
        self, data_dir: Path, *, block_size: int = DEFAULT_BLOCK_SIZE, max_producer_id: int = MAX_PRODUCER_ID
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self._path = Path(data_dir) / PRODUCER_ID_BLOCK_FILE
        self._block_size = block_size
        self._max_producer_id = max_producer_id
        self._next = self._read_persisted_end()
        self._block_end = self._next  # exclusive; nothing of a block is usable until it is persisted

    @property
    def path(self) -> Path:
        return self._path

    def generate_producer_id(self) -> int:
        """The next id; raises :class:`ProducerIdsExhausted` after ``max_producer_id``."""
        if self._next >= self._block_end:
            self._allocate_block()
        producer_id = self._next
        self._next += 1
        return producer_id

    def _allocate_block(self) -> None:
        start = self._next
        if start > self._max_producer_id:
            raise ProducerIdsExhausted(f"all producer ids up to {self._max_producer_id} have been handed out")
        end = min(start + self._block_size, self._max_producer_id + 1)
        self._persist_end(end)
        self._block_end = end
        log.info("allocated producer id block [%d, %d)", start, end)

    def _read_persisted_end(self) -> int:
        try:
            raw = self._path.read_text()
        except FileNotFoundError:
            return 0
        try:
            data = json.loads(raw)
            end = int(data["next_block_start"])
        except (ValueError, KeyError, TypeError) as exc:
            # Guessing would risk handing out an id twice: refuse to start instead.
            raise RuntimeError(
                f"{self._path} is unreadable ({exc}); restore it or remove it deliberately"
            ) from exc
        if end < 0:
            raise RuntimeError(f"{self._path} holds a negative producer id {end}")
        return end

    def _persist_end(self, end: int) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self._path, json.dumps({"version": _FORMAT_VERSION, "next_block_start": end}))
