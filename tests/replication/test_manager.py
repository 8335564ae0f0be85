"""The replica manager on metadata from the real controller: leadership from images, acks=all and
waits for replication completing as followers fetch, fetches held until data comes, leadership
callbacks, high-watermark checkpoints."""

from __future__ import annotations

from tests.controller.harness import create_topics, live_cluster
from tests.replication.harness import batch

from onceflow.broker.replica.config import ReplicaConfig
from onceflow.broker.replica.fetcher import FetchRequestData
from onceflow.broker.replica.manager import ReplicaManager, ToLeader
from onceflow.log.config import LogConfig
from onceflow.log.log import Log
from onceflow.log.offset_checkpoint import read_offsets
from onceflow.protocol.errors import ErrorCode

KEY = ("t", 0)


def managers(tmp_path, events):
    ctl, log = live_cluster(3)
    create_topics(ctl, log, ("t", {0: [1, 2, 3]}, {"min.insync.replicas": "2"}))
    image = ctl.committed_image
    out = {}
    for b in (1, 2, 3):
        m = ReplicaManager(
            ReplicaConfig(broker_id=b, replica_fetch_wait_max_ms=100),
            lambda topic, index, _id, b=b: Log.open(
                tmp_path / f"b{b}" / f"{topic}-{index}", LogConfig(min_insync_replicas=2)
            ),
            checkpoint_path=tmp_path / f"b{b}" / "replication-offset-checkpoint",
            on_leadership=lambda key, p, b=b: events.append((b, key, p.is_leader, p.leader_epoch)),
        )
        m.broker_epoch = image.broker(b).epoch
        m.apply_image(image, 0)
        out[b] = m
    return out


def fetch(ms: dict, follower: int, now: int) -> list:
    """The follower's next fetcher request, sent to its leader; each answer (now or when the leader
    sends it later) goes back to the follower and into the returned list."""
    got: list = []
    for message in ms[follower].poll(now):
        if isinstance(message, ToLeader) and isinstance(message.request, FetchRequestData):

            def reply(answers, message=message, m=ms[follower]) -> None:
                got.append(answers)
                m.handle_fetcher_response(message.leader_id, message.request, answers, now)

            ms[message.leader_id].fetch_for_follower(message.request, now, reply)
    return got


def pump(ms: dict, now: int, rounds: int = 3) -> None:
    """Fetch rounds of both followers, then time enough for held fetches to be answered."""
    for step in range(rounds):
        for follower in (2, 3):
            fetch(ms, follower, now + step)
        ms[1].poll(now + step + 200)


def test_acks_all_completes_once_the_isr_fetched_and_waits_can_be_for_any_offset(tmp_path):
    events: list = []
    ms = managers(tmp_path, events)
    assert events == [(1, KEY, True, 0)]  # only the leader hears of it: followers start as followers
    assert ms[1].partition(KEY).is_leader and not ms[2].partition(KEY).is_leader
    done: list = []
    result = ms[1].append(KEY, batch(0, 3), 10, required_acks=-1, on_complete=lambda r, e: done.append(e))
    waited: list = []
    ms[1].when_replicated(KEY, result.last_offset + 1, 10, 5_000, waited.append)
    assert done == [] and waited == []
    pump(ms, 20)
    assert done == [ErrorCode.NONE] and waited == [ErrorCode.NONE]
    assert ms[2].partition(KEY).log.read(0, 10**6) == ms[1].partition(KEY).log.read(0, 10**6)
    ms[2].checkpoint_high_watermarks()
    assert read_offsets(tmp_path / "b2" / "replication-offset-checkpoint") == {KEY: 3}


def test_an_acks_all_wait_ends_at_its_timeout(tmp_path):
    ms = managers(tmp_path, [])
    done: list = []
    ms[1].append(
        KEY, batch(0, 1), 0, required_acks=-1, timeout_ms=500, on_complete=lambda r, e: done.append(e)
    )
    ms[1].poll(400)
    assert done == []
    ms[1].poll(501)
    assert done == [ErrorCode.REQUEST_TIMED_OUT]


def test_a_follower_fetch_without_data_waits_for_an_append(tmp_path):
    ms = managers(tmp_path, [])
    got = fetch(ms, 2, 0)
    assert got == []  # held: nothing to send yet
    ms[1].append(KEY, batch(0, 1), 10, required_acks=1)
    assert len(got) == 1 and got[0][KEY].records
    assert fetch(ms, 3, 20)[0][KEY].records  # data at once
    held = fetch(ms, 2, 30)
    ms[1].poll(129)
    assert held == []
    ms[1].poll(131)  # replica.fetch.wait.max.ms (100) passed
    assert len(held) == 1 and held[0][KEY].records == b""
