"""A replicated log you can run and kill: the quorum with a toy state machine, for trying it out and
for the process tests.

    python -m onceflow.raft.demo --node-id 1 --voters 1@127.0.0.1:19093,2@127.0.0.1:29093,3@127.0.0.1:39093 \\
        --data-dir /tmp/raft1

Whichever node leads appends the record ``<node id>:<count>`` every ``--append-every-ms``; every
node applies what is committed to its state (the list of values) and prints one JSON line per event
on stdout (each with ``ts``, the wall-clock time in ms): ``started``, ``leader`` (leader id or null,
epoch), ``commit`` (offset, epoch, values, and ``appended_ms``: when the leader took them),
``snapshot-loaded`` and ``snapshot-taken`` (offset, epoch, how many values and their digest). Every
``--snapshot-every`` committed values it snapshots its state. SIGTERM resigns leadership and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import hashlib
import json
import logging
import signal
import sys
import time
from pathlib import Path

from onceflow.protocol.errors import InvalidConfig
from onceflow.raft.config import RaftConfig, parse_voters
from onceflow.raft.errors import NotLeader
from onceflow.raft.file_storage import FAULT_POINTS, FileStorage
from onceflow.raft.records import Batch
from onceflow.raft.server import RaftServer
from onceflow.raft.snapshot_format import Snapshot


def digest(values: list[str]) -> str:
    """A short fingerprint of a list of values (to compare a loaded snapshot with another node's log)."""
    return hashlib.sha256("\n".join(values).encode()).hexdigest()[:16]


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, "ts": time.time_ns() // 1_000_000, **fields}), flush=True)


class Counter:
    """The state machine: the committed values in order."""

    def __init__(self, node_id: int, snapshot_every: int) -> None:
        self.node_id = node_id
        self.values: list[str] = []
        self.next_offset = 0
        self.leader: tuple[int | None, int] = (None, 0)
        self.snapshot_every = snapshot_every
        self.server: RaftServer | None = None
        self._since_snapshot = 0

    def handle_commit(self, batch: Batch) -> None:
        values = [record.decode() for record in batch.records]
        self.values.extend(values)
        self.next_offset = batch.next_offset
        emit(
            "commit",
            offset=batch.base_offset,
            epoch=batch.epoch,
            values=values,
            appended_ms=batch.append_timestamp_ms,
        )
        self._since_snapshot += len(values)
        if self.snapshot_every and self._since_snapshot >= self.snapshot_every and self.server is not None:
            writer = self.server.create_snapshot(self.next_offset)
            if writer is not None:
                writer.append(v.encode() for v in self.values)
                snapshot_id = writer.freeze()
                emit(
                    "snapshot-taken",
                    offset=snapshot_id.offset,
                    epoch=snapshot_id.epoch,
                    values=len(self.values),
                    digest=digest(self.values),
                )
            self._since_snapshot = 0

    def handle_load_snapshot(self, snapshot: Snapshot) -> None:
        self.values = [record.decode() for record in snapshot.records]
        self.next_offset = snapshot.offset
        emit(
            "snapshot-loaded",
            offset=snapshot.offset,
            epoch=snapshot.epoch,
            values=len(self.values),
            digest=digest(self.values),
        )

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self.leader = (leader_id, epoch)
        emit("leader", leader=leader_id, epoch=epoch)


async def run(args: argparse.Namespace) -> int:
    voters = parse_voters(args.voters)
    config = RaftConfig.from_properties(dict(args.config))
    faults = {name: int(count) for name, count in args.fault}
    storage = FileStorage(Path(args.data_dir), faults=faults)
    machine = Counter(args.node_id, args.snapshot_every)
    listen = voters.get(args.node_id)
    server = RaftServer(args.node_id, voters, storage, config, listener=machine, listen=listen)
    machine.server = server
    await server.start()
    emit("started", node=args.node_id, port=server.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    count = 0
    while not stop.is_set() and server.failure is None:
        try:
            await asyncio.wait_for(stop.wait(), args.append_every_ms / 1000)
        except TimeoutError:
            pass
        if machine.leader == (args.node_id, server.node.state.epoch) and args.append_every_ms > 0:
            count += 1
            try:
                server.append([f"{args.node_id}:{count}".encode()], epoch=machine.leader[1])
            except NotLeader:
                pass
    was_leader = machine.leader[0] == args.node_id
    await server.stop()
    emit(
        "stopped",
        node=args.node_id,
        resigned=was_leader,
        unacknowledged=sorted(server.node.resign_unacknowledged),
    )
    return 1 if server.failure is not None else 0


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m onceflow.raft.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument(
        "--voters", required=True, help="controller.quorum.voters: 1@host:port,2@host:port,..."
    )
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--append-every-ms", type=int, default=100)
    parser.add_argument(
        "--snapshot-every", type=int, default=0, help="snapshot after this many values (0: never)"
    )
    parser.add_argument("--config", type=_pair, action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--fault",
        type=_pair,
        action="append",
        default=[],
        metavar="NAME=N",
        help=f"one of {sorted(FAULT_POINTS)}",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    faulthandler.register(signal.SIGUSR1)  # kill -USR1 <pid> prints every thread's stack on stderr
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format=f"%(asctime)s node{args.node_id} %(name)s %(levelname)s %(message)s",
    )
    try:
        return asyncio.run(run(args))
    except InvalidConfig as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
