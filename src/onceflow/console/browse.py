"""The message browser: records of one partition from an offset or a timestamp, their keys, values
and headers decoded for reading, and transaction markers shown where they are in the log.

Reads with Fetch like a consumer (read_uncommitted shows the log as written, aborted records
included; read_committed stops at the last stable offset and hides aborted records, as a consumer
would), but keeps the control batches a consumer drops (:func:`records_and_markers`).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

from onceflow.client.async_client import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, AsyncClient
from onceflow.client.fetch_records import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    BrowsedRecord,
    Marker,
    records_and_markers,
)

FORMATS = ("auto", "text", "json", "hex")
MAX_LIMIT = 500
DEFAULT_LIMIT = 50
_FETCH_BYTES = 1 << 20


class BadInput(ValueError):
    """A query parameter that cannot be used (the page answers 400)."""


@dataclass(frozen=True)
class Query:
    partition: int = 0
    offset: int | None = None
    timestamp_ms: int | None = None
    limit: int = DEFAULT_LIMIT
    isolation_level: int = READ_UNCOMMITTED
    format: str = "auto"

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == READ_COMMITTED


def _int(params, name: str, default: int | None, minimum: int = 0) -> int | None:
    raw = (params.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadInput(f"{name} must be a whole number, not {raw!r}") from None
    if value < minimum:
        raise BadInput(f"{name} must be at least {minimum}, not {value}")
    return value


def parse_timestamp(raw: str) -> int:
    """Milliseconds since the epoch from a number or an ISO 8601 time (UTC unless it says)."""
    raw = raw.strip()
    if raw.lstrip("-").isdigit():
        return int(raw)
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        raise BadInput(
            f"timestamp must be milliseconds since the epoch or an ISO time like 2024-05-01T12:00:00Z, not {raw!r}"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def parse_query(params, partitions: int) -> Query:
    partition = _int(params, "partition", 0)
    if partition >= partitions:
        raise BadInput(f"partition {partition} does not exist: the topic has {partitions}")
    timestamp = (params.get("timestamp") or "").strip()
    fmt = params.get("format") or "auto"
    if fmt not in FORMATS:
        raise BadInput(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    isolation = params.get("isolation") or "read_uncommitted"
    if isolation not in ("read_uncommitted", "read_committed"):
        raise BadInput(f"isolation must be read_uncommitted or read_committed, not {isolation!r}")
    return Query(
        partition=partition,
        offset=_int(params, "offset", None),
        timestamp_ms=parse_timestamp(timestamp) if timestamp else None,
        limit=min(_int(params, "limit", DEFAULT_LIMIT, minimum=1), MAX_LIMIT),
        isolation_level=READ_COMMITTED if isolation == "read_committed" else READ_UNCOMMITTED,
        format=fmt,
    )


@dataclass
class Shown:
    """One decoded piece (a key, value or header value) and how it was decoded."""

    text: str | None
    kind: str  # "null", "text", "json", "hex"


@dataclass
class Row:
    offset: int
    timestamp: int
    marker: str = ""  # "COMMIT" / "ABORT" for a transaction marker
    key: Shown | None = None
    value: Shown | None = None
    headers: list[tuple[str, Shown]] = field(default_factory=list)
    producer_id: int = -1
    transactional: bool = False
    size: int = 0


@dataclass
class Page:
    query: Query
    start: int
    log_start: int
    end: int  # the high watermark, or the LSO under read_committed
    rows: list[Row]
    next_offset: int
    hidden: int  # aborted records read_committed left out


def show(data: bytes | None, fmt: str) -> Shown:
    if data is None:
        return Shown(None, "null")
    if fmt == "hex":
        return Shown(data.hex(" "), "hex")
    text = None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    if fmt in ("auto", "json") and text is not None:
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        else:
            if fmt == "json" or isinstance(parsed, (dict, list)):
                return Shown(json.dumps(parsed, indent=2, ensure_ascii=False), "json")
    if text is not None and (
        fmt == "text" or text.isprintable() or fmt == "auto" and _mostly_printable(text)
    ):
        return Shown(text, "text")
    if fmt == "text":
        return Shown(base64.b64encode(data).decode(), "base64")
    return Shown(data.hex(" "), "hex")


def _mostly_printable(text: str) -> bool:
    return all(ch.isprintable() or ch in "\n\r\t" for ch in text)


def _row(entry: BrowsedRecord | Marker, fmt: str) -> Row:
    if isinstance(entry, Marker):
        return Row(
            entry.offset,
            entry.timestamp,
            marker="COMMIT" if entry.commit else "ABORT",
            producer_id=entry.producer_id,
            transactional=True,
        )
    r = entry.record
    return Row(
        r.offset,
        r.timestamp,
        key=show(r.key, fmt),
        value=show(r.value, fmt),
        headers=[(name, show(value, fmt)) for name, value in (r.headers or ())],
        producer_id=entry.producer_id,
        transactional=entry.transactional,
        size=(len(r.key) if r.key else 0) + (len(r.value) if r.value else 0),
    )


async def browse(client: AsyncClient, topic: str, query: Query) -> Page:
    """Up to ``query.limit`` entries of ``topic``'s partition from the offset (or the first at or
    after the timestamp, or else the last ``limit`` before the end)."""
    p = query.partition
    log_start = (await client.list_offsets(topic, [p], timestamp=EARLIEST_TIMESTAMP))[p]
    end = (
        await client.list_offsets(
            topic, [p], timestamp=LATEST_TIMESTAMP, isolation_level=query.isolation_level
        )
    )[p]
    if query.offset is not None:
        start = query.offset
    elif query.timestamp_ms is not None:
        found = (await client.list_offsets(topic, [p], timestamp=query.timestamp_ms))[p]
        start = end if found < 0 else found  # -1: nothing at or after that time
    else:
        start = max(end - query.limit, log_start)
    start = max(start, log_start)
    rows: list[Row] = []
    hidden = 0
    offset = start
    while len(rows) < query.limit and offset < end:
        answer = await client.fetch(
            topic,
            {p: offset},
            isolation_level=query.isolation_level,
            max_wait_ms=100,
            partition_max_bytes=_FETCH_BYTES,
        )
        fetched = answer.get(p)
        if fetched is None:
            break  # the broker left the partition out of its answer (Tansu may): show what we have
        entries, next_offset, skipped = records_and_markers(
            fetched.records,
            fetch_offset=offset,
            isolation_level=query.isolation_level,
            aborted_transactions=fetched.aborted_transactions,
        )
        hidden += skipped
        for entry in entries:
            if len(rows) >= query.limit or entry.offset >= end:
                break
            rows.append(_row(entry, query.format))
        if next_offset <= offset:
            break  # nothing complete came back: stop rather than spin
        offset = next_offset
    next_from = rows[-1].offset + 1 if rows else start
    return Page(query, start, log_start, end, rows, next_from, hidden)


def format_time(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
