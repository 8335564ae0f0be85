"""An in-memory stand-in for ``onceflow.log.log.Log`` (the contract in docs/internals.md), so the
broker's metadata and admin paths can be tested without the log layer's files."""

from __future__ import annotations

from pathlib import Path

from onceflow.log.config import LogConfig
from onceflow.protocol.errors import OffsetOutOfRange


class FakeAppendResult:
    def __init__(self, base_offset: int, last_offset: int) -> None:
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.log_append_time = -1
        self.log_start_offset = 0
        self.duplicate = False


class FakeLog:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.batches: list[tuple[int, bytes]] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.deleted = False
        self.closed = False
        self.config = LogConfig()

    @property
    def high_watermark(self) -> int:
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self.log_end_offset

    def append(self, batches, **_kwargs) -> FakeAppendResult:
        base = self.log_end_offset
        for header, view in batches:
            data = bytearray(view)
            data[0:8] = self.log_end_offset.to_bytes(8, "big", signed=True)
            self.batches.append((self.log_end_offset, bytes(data)))
            self.log_end_offset += header.last_offset_delta + 1
        return FakeAppendResult(base, self.log_end_offset - 1)

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list:
        return []  # no transactions in the stand-in

    def read(self, offset: int, max_bytes: int, *, max_offset=None, min_one_batch=True) -> bytes:
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRange(f"offset {offset}")
        out = b""
        for base, data in self.batches:
            if base < offset or (max_offset is not None and base >= max_offset):
                continue
            if len(out) + len(data) > max_bytes and (out or not min_one_batch):
                break
            out += data
        return out

    def offset_for_timestamp(self, ts_ms: int):
        return None

    def apply_retention(self, now_ms=None) -> int:
        return 0

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def delete(self) -> None:
        self.deleted = True


def fake_log_opener(directory: Path, overrides) -> FakeLog:
    directory.mkdir(parents=True, exist_ok=True)
    return FakeLog(directory)
