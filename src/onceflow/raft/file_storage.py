"""The quorum's durable state on disk, in Kafka's layout under ``<data-dir>/__cluster_metadata-0/``:

- the log: segments of magic-2 record batches through our ``log`` package (``Log``), each batch's
  ``partitionLeaderEpoch`` the Raft epoch it was written in; truncation is ``Log.truncate_to``,
  moving the log start after a snapshot is ``Log.delete_records_before`` (its ``log-start-offset``
  file is written before the segments go);
- ``quorum-state``: the election state as Kafka writes it (one line of JSON: ``leaderId``,
  ``leaderEpoch``, ``votedId``, ``currentVoters``, ``data_version`` 0), replaced atomically and
  fsynced before the node answers anything that depends on it;
- snapshots: ``<offset:020d>-<epoch:010d>.checkpoint``, written as ``.checkpoint.part``, fsynced and
  renamed into place (a ``.part`` left by a crash is deleted on open).

Everything survives ``kill -9``, and a power cut loses only log appends that were not flushed,
which the core never acknowledged. Kafka keeps a ``leader-epoch-checkpoint`` file; here the epoch
cache is rebuilt on open from the batch headers (the metadata log is small), so it can never
disagree with the log.

On open, a snapshot that is ahead of the whole log (a follower that crashed between storing a
fetched snapshot and restarting its log after it) finishes that move.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from onceflow.log.append_origin import AppendOrigin
from onceflow.log.config import LogConfig
from onceflow.log.durable_file import fsync_directory, write_atomically
from onceflow.log.log import Log, wall_clock_ms
from onceflow.log.segment import LOG_SUFFIX, segment_file_name
from onceflow.protocol.errors import OffsetOutOfRange
from onceflow.protocol.records import read_header
from onceflow.raft import batch_codec
from onceflow.raft.config import MAX_BATCH_SIZE_BYTES
from onceflow.raft.errors import QuorumViolation, SnapshotError
from onceflow.raft.records import Batch, OffsetAndEpoch
from onceflow.raft.storage import LOG_BEGINNING, ElectionState, EpochCache, RaftStorage

log = logging.getLogger(__name__)

METADATA_PARTITION = "__cluster_metadata-0"
QUORUM_STATE_FILE = "quorum-state"
SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".part"

# Fault points (tests, the demo's --fault): kill the process with SIGKILL around the N-th write of
# quorum-state, to show a vote or an epoch is never half-recorded or answered before it is on disk.
KILL_BEFORE_QUORUM_STATE_WRITE = "kill-before-quorum-state-write"
KILL_AFTER_QUORUM_STATE_WRITE = "kill-after-quorum-state-write"
FAULT_POINTS = frozenset({KILL_BEFORE_QUORUM_STATE_WRITE, KILL_AFTER_QUORUM_STATE_WRITE})


class QuorumStateError(Exception):
    """``quorum-state`` exists but cannot be read: starting without it could vote twice in one epoch."""


def snapshot_file_name(snapshot_id: OffsetAndEpoch) -> str:
    return f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_file_name(name: str) -> OffsetAndEpoch | None:
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    offset, dash, epoch = name[: -len(SNAPSHOT_SUFFIX)].partition("-")
    if not dash or len(offset) != 20 or len(epoch) != 10 or not offset.isdigit() or not epoch.isdigit():
        return None
    return OffsetAndEpoch(int(offset), int(epoch))


def read_quorum_state(path: Path) -> ElectionState | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
        version = data["data_version"]
        if version not in (0, 1):
            raise ValueError(f"data_version {version} is not 0 or 1")
        leader, voted = int(data.get("leaderId", -1)), int(data.get("votedId", -1))
        voters = tuple(int(v["voterId"]) for v in data.get("currentVoters") or ())
        return ElectionState(
            int(data["leaderEpoch"]),
            None if leader < 0 else leader,
            None if voted < 0 else voted,
            voters,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise QuorumStateError(
            f"cannot read {path}: {exc}; move it aside only if this node never voted"
        ) from exc


def quorum_state_json(election: ElectionState, cluster_id: str | None = None) -> str:
    """Kafka's ``quorum-state`` (QuorumStateData v0 as JSON, on one line)."""
    return json.dumps(
        {
            "clusterId": cluster_id or "",
            "leaderId": -1 if election.leader_id is None else election.leader_id,
            "leaderEpoch": election.epoch,
            "votedId": -1 if election.voted_id is None else election.voted_id,
            "appliedOffset": 0,
            "currentVoters": [{"voterId": v} for v in election.voters],
            "data_version": 0,
        },
        separators=(",", ":"),
    )


class FileStorage(RaftStorage):
    def __init__(
        self,
        data_dir: Path,
        *,
        cluster_id: str | None = None,
        faults: Mapping[str, int] | None = None,
    ) -> None:
        """Open (or create) ``<data_dir>/__cluster_metadata-0``. ``faults`` maps a fault point to
        the number of the quorum-state write at which it kills the process."""
        self.directory = Path(data_dir) / METADATA_PARTITION
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cluster_id = cluster_id
        self._faults = dict(faults or {})
        unknown = set(self._faults) - FAULT_POINTS
        if unknown:
            raise ValueError(f"unknown fault point(s) {sorted(unknown)}; known: {sorted(FAULT_POINTS)}")
        self._election_writes = 0
        self._quorum_state_path = self.directory / QUORUM_STATE_FILE
        self._election = read_quorum_state(self._quorum_state_path)
        for leftover in self.directory.glob("*" + SNAPSHOT_SUFFIX + PARTIAL_SUFFIX):
            leftover.unlink()
        self._snapshots = sorted(
            (s for s in map(parse_snapshot_file_name, os.listdir(self.directory)) if s is not None),
            key=lambda s: s.offset,
        )
        self._log = self._open_log()
        self.epochs = EpochCache()
        self._rebuild_epochs()
        latest = self.latest_snapshot_id()
        if latest is not None and latest > self.end_offset_and_epoch():
            log.info("log of %s ends before snapshot %s: starting it there", self.directory, latest)
            self.reset_to_snapshot(latest)

    def _open_log(self) -> Log:
        config = LogConfig(retention_ms=-1, max_message_bytes=MAX_BATCH_SIZE_BYTES + 1024 * 1024)
        return Log.open(self.directory, config, clock_ms=wall_clock_ms)

    def _rebuild_epochs(self) -> None:
        start = self._log.log_start_offset
        base = LOG_BEGINNING
        if start > 0:
            at_start = [s for s in self._snapshots if s.offset == start]
            if not at_start:
                raise SnapshotError(
                    f"the log in {self.directory} starts at {start} but no snapshot ends there"
                )
            base = at_start[0]
        self.epochs = EpochCache(base)
        for header, _view in self._log.iter_batches(start):
            if header.base_offset >= start:
                self.epochs.assign(header.partition_leader_epoch, header.base_offset)

    # --- quorum state ---

    def read_election(self) -> ElectionState | None:
        return self._election

    def write_election(self, election: ElectionState) -> None:
        self._election_writes += 1
        self._maybe_kill(KILL_BEFORE_QUORUM_STATE_WRITE)
        write_atomically(self._quorum_state_path, quorum_state_json(election, self.cluster_id))
        self._election = election
        self._maybe_kill(KILL_AFTER_QUORUM_STATE_WRITE)

    def _maybe_kill(self, point: str) -> None:
        if self._faults.get(point) == self._election_writes:
            log.warning(
                "fault point %s: killing the process at quorum-state write %d", point, self._election_writes
            )
            os.kill(os.getpid(), signal.SIGKILL)

    # --- log ---

    @property
    def log_start_offset(self) -> int:
        return self._log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._log.log_end_offset

    def append(self, batches: Sequence[Batch]) -> None:
        self._record_append(batches)
        encoded = []
        for batch in batches:
            raw = bytearray(batch_codec.encode(batch))
            encoded.append((read_header(raw), memoryview(raw)))
        if encoded:
            self._log.append(encoded, origin=AppendOrigin.REPLICATION)

    def flush(self) -> None:
        # The leader flushes every write before it counts it (a NoOpRecord every
        # metadata.max.idle.interval.ms, 500 ms by default): the records only, whose fsync is what the
        # quorum needs. Rewriting both index files on each flush cost ~4x the CPU (and the wall time,
        # which every metadata commit waits for); they are written when the segment rolls or the log
        # closes, and rebuilt from the data after a crash.
        self._log.flush(indexes=False)

    def read(self, offset: int, max_bytes: int, end_offset: int | None = None) -> list[Batch]:
        try:
            raw = self._log.read(offset, max_bytes, max_offset=end_offset)
        except OffsetOutOfRange:
            return []
        batches = batch_codec.decode(raw)
        if end_offset is not None:
            batches = [b for b in batches if b.next_offset <= end_offset]
        return batches

    def truncate_to(self, offset: int) -> None:
        self._log.truncate_to(offset)
        self.epochs.truncate_from_end(self.log_end_offset)

    def close(self) -> None:
        self._log.close()

    def abandon(self) -> None:
        """Close without flushing (what a crash leaves; tests)."""
        self._log.abandon()

    # --- snapshots ---

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return list(self._snapshots)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> bytes | None:
        if snapshot_id not in self._snapshots:
            return None
        try:
            return (self.directory / snapshot_file_name(snapshot_id)).read_bytes()
        except FileNotFoundError:
            return None

    def write_snapshot(self, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        path = self.directory / snapshot_file_name(snapshot_id)
        write_atomically(path, data, temp_suffix=PARTIAL_SUFFIX)
        if snapshot_id not in self._snapshots:
            self._snapshots.append(snapshot_id)
            self._snapshots.sort(key=lambda s: s.offset)

    def _delete_snapshots_below(self, offset: int) -> None:
        for old in [s for s in self._snapshots if s.offset < offset]:
            (self.directory / snapshot_file_name(old)).unlink(missing_ok=True)
            self._snapshots.remove(old)

    def delete_before(self, snapshot_id: OffsetAndEpoch) -> None:
        if snapshot_id not in self._snapshots or snapshot_id.offset > self.log_end_offset:
            raise QuorumViolation(f"cannot start the log at {snapshot_id}: no such snapshot within the log")
        if snapshot_id.offset > self.log_start_offset:
            self._log.delete_records_before(snapshot_id.offset)
            self.epochs.truncate_from_start(snapshot_id)
        self._delete_snapshots_below(snapshot_id.offset)

    def reset_to_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        if snapshot_id not in self._snapshots:
            raise QuorumViolation(f"cannot reset the log to {snapshot_id}: no such snapshot")
        self._log.abandon()
        keep = {QUORUM_STATE_FILE, *(snapshot_file_name(s) for s in self._snapshots)}
        # Newest segments first: a crash part way leaves a shorter log, which the next open moves
        # after the snapshot again.
        for path in sorted(self.directory.iterdir(), key=lambda p: p.name, reverse=True):
            if path.name not in keep and path.is_file():
                path.unlink()
        (self.directory / segment_file_name(snapshot_id.offset, LOG_SUFFIX)).touch()
        fsync_directory(self.directory)
        self._log = self._open_log()
        self.epochs.reset(snapshot_id)
        self._delete_snapshots_below(snapshot_id.offset)
