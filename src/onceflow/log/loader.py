"""Opening a partition directory (Kafka's ``LogLoader``): what is on disk after a clean stop or a
crash becomes a consistent :class:`~onceflow.log.log.Log`.

In order:

1. the ``.clean_shutdown`` marker says whether the last stop was clean (and is removed: a crash from
   now on must not look clean);
2. a cleaned segment whose install a crash interrupted is finished (its ``<base>.swap`` list is the
   commit point: written, the install completes; not written, the cleaner's ``.cleaned`` files are
   leftovers and the old segments stay);
3. leftovers go: temporary files, indexes whose segment is gone, a cleaning that never committed;
4. the segments open; after an unclean stop the active one is CRC-scanned and cut at its last valid
   batch (a sealed segment was complete when it rolled, so only one whose index does not check out is
   rescanned);
5. the log start offset DeleteRecords left (``log-start-offset``) is read, and segments wholly below it
   (a crash between writing it and deleting them) are deleted;
6. the producer state is loaded from the newest valid snapshot and the log after it is replayed
   through the live append path (which also rebuilds the aborted-transaction index of that range).

The files of that protocol are written here too, by the running log: the swap list and the install
it commits (:func:`write_swap_list`, :func:`finish_swap`, used by ``Log.replace_segments``), and the
log start offset (:func:`write_log_start_offset`, before DeleteRecords is answered).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from onceflow.log.config import LogConfig
from onceflow.log.durable_file import fsync_directory, write_atomically
from onceflow.log.producer_state import ProducerStateManager
from onceflow.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, segment_file_name
from onceflow.log.txn_index import TXN_INDEX_SUFFIX

if TYPE_CHECKING:
    from onceflow.log.log import Log

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
# The cleaner's files: a cleaned segment before it is installed, and the list of segments it replaces.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
LOG_START_OFFSET_FILE = "log-start-offset"
_SEGMENT_NAME_DIGITS = 20


def load_log(
    log_class: type[Log],
    directory: Path,
    config: LogConfig,
    *,
    clock_ms: Callable[[], int],
    producer_id_expiration_ms: int,
) -> Log:
    """Create or recover the partition directory and return its log (see the module docstring). One
    DEBUG line says what was found (a broker logs one summary for all its partitions)."""
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / CLEAN_SHUTDOWN_FILE
    clean = marker.exists()
    if clean:
        marker.unlink()
    finish_swaps(directory)  # a crash in the middle of installing a cleaned segment
    bases = segment_bases(directory)
    # Only a log that was there without its marker stopped uncleanly: a new (or empty) directory has
    # nothing to recover.
    existed = bool(bases)
    remove_leftovers(directory, set(bases))
    now = clock_ms()
    segments: list[LogSegment] = []
    result = None
    try:
        for i, base in enumerate(bases):
            is_active = i == len(bases) - 1
            segments.append(
                LogSegment.open(
                    directory, base, config.index_interval_bytes, now, recover=is_active and not clean
                )
            )
        if not segments:
            segments.append(LogSegment.open(directory, 0, config.index_interval_bytes, now, recover=False))
        state = ProducerStateManager(directory.name, producer_id_expiration_ms=producer_id_expiration_ms)
        deleted_below = min(read_log_start_offset(directory), segments[-1].next_offset)
        result = log_class(directory, config, clock_ms, segments, state, deleted_below, clean=clean)
        result.delete_segments_below_log_start()
        start, end = result.log_start_offset, result.log_end_offset
        replayed = result.replay_producer_state(state.load_latest(directory, start, end, now_ms=now))
    except BaseException:
        # Out of file descriptors or a bad disk: give back what was opened, or every failed open
        # would leak descriptors until the process has none left.
        if result is not None:
            result.abandon()
        else:
            for segment in segments:
                segment.close()
        raise
    if not existed:
        log.debug("created log %s", directory)  # a new partition: nothing to recover or report
        return result
    result.recovered_unclean = not clean
    log.debug(
        "opened log %s (%s shutdown): offsets [%d, %d), %d segment(s), %d producer(s), "
        "%d producer batch(es) replayed",
        directory,
        "clean" if clean else "unclean",
        start,
        end,
        len(segments),
        state.producer_count,
        replayed,
    )
    return result


def segment_bases(directory: Path) -> list[int]:
    bases = []
    for path in directory.glob("*" + LOG_SUFFIX):
        stem = path.name[: -len(LOG_SUFFIX)]
        if len(stem) == _SEGMENT_NAME_DIGITS and stem.isdigit():
            bases.append(int(stem))
    return sorted(bases)


def write_swap_list(directory: Path, base: int, bases: list[int]) -> None:
    write_atomically(directory / segment_file_name(base, SWAP_SUFFIX), " ".join(map(str, bases)) + "\n")


def finish_swap(directory: Path, base: int, bases: list[int]) -> None:
    """Replace the segments ``bases`` by ``<base>``'s cleaned files. Idempotent: a crash anywhere in it
    is finished by running it again (the old files go before the cleaned ones are renamed in)."""
    cleaned_log = directory / (segment_file_name(base, LOG_SUFFIX) + CLEANED_SUFFIX)
    cleaned_txn = directory / (segment_file_name(base, TXN_INDEX_SUFFIX) + CLEANED_SUFFIX)
    suffixes = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
    for old in bases:
        if old == base and not cleaned_log.exists():
            continue  # renamed in already: <base>.log is the cleaned one
        for suffix in suffixes:
            (directory / segment_file_name(old, suffix)).unlink(missing_ok=True)
    if cleaned_log.exists():
        os.replace(cleaned_log, directory / segment_file_name(base, LOG_SUFFIX))
    if cleaned_txn.exists():
        os.replace(cleaned_txn, directory / segment_file_name(base, TXN_INDEX_SUFFIX))
    fsync_directory(directory)
    (directory / segment_file_name(base, SWAP_SUFFIX)).unlink(missing_ok=True)
    fsync_directory(directory)


def finish_swaps(directory: Path) -> None:
    if not directory.exists():
        return
    for path in sorted(directory.glob("*" + SWAP_SUFFIX)):
        stem = path.name[: -len(SWAP_SUFFIX)]
        try:
            bases = [int(part) for part in path.read_text().split()]
        except ValueError:
            bases = []
        if not stem.isdigit() or not bases or bases[0] != int(stem):
            # It is renamed into place whole, so this is not a torn write: keep the old segments.
            log.error("ignoring unreadable %s: the segments it names stay uncleaned", path)
            path.unlink()
            continue
        log.info("finishing the install of cleaned segment %s (a crash interrupted it)", stem)
        finish_swap(directory, int(stem), bases)


def remove_leftovers(directory: Path, bases: set[int]) -> None:
    """Remove temporary files and indexes whose segment is gone (a crash midway through deleting one),
    and the files of a cleaning that never reached its commit point."""
    for path in directory.iterdir():
        name = path.name
        if name.endswith(".tmp") or name.endswith(CLEANED_SUFFIX):
            path.unlink(missing_ok=True)
            continue
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            stem = name[: -len(suffix)]
            if name.endswith(suffix) and stem.isdigit() and int(stem) not in bases:
                path.unlink(missing_ok=True)


def read_log_start_offset(directory: Path) -> int:
    """The start DeleteRecords left in ``directory``, or 0. A damaged file cannot be half-written (it
    is renamed into place), so one that does not parse is a real fault: say so and keep every record."""
    path = directory / LOG_START_OFFSET_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return 0
    try:
        return max(int(text.strip()), 0)
    except ValueError:
        log.error("ignoring unreadable %s (%r): the log start stays at the first segment", path, text[:40])
        return 0


def write_log_start_offset(directory: Path, offset: int) -> None:
    write_atomically(directory / LOG_START_OFFSET_FILE, f"{offset}\n")
