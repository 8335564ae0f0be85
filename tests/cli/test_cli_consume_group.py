"""``onceflow consume --group``: the console consumer as a member of a consumer group, with the
classic and the consumer (KIP-848) protocol, against one `onceflow serve` subprocess for the module.
Consecutive runs of a group must print every record exactly once between them. The last tests check
what is committed against a stand-in consumer whose polls return more than asked for."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from tests.conftest import topic_name

from onceflow.cli.main import cli
from onceflow.client import Producer
from onceflow.client.consumer import CommitFailed, ConsumerGroupMetadata, ConsumerRecord, TopicPartition
from onceflow.client.simple import SimpleClient

PARTITIONS = 3
PER_PARTITION = 10


def onceflow(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "onceflow", *args], capture_output=True, text=True, timeout=timeout
    )


def filled_topic(bootstrap: str) -> tuple[str, list[str]]:
    """A topic of PARTITIONS partitions x PER_PARTITION records; its lines as --print-key prints them."""
    topic = topic_name("consume-group")
    lines = []
    with SimpleClient(bootstrap) as client:
        client.create_topic(topic, partitions=PARTITIONS)
        for p in range(PARTITIONS):
            records = [(f"k{p}", f"p{p}-{i}") for i in range(PER_PARTITION)]
            client.produce(topic, records, partition=p)
            lines += [f"{key}|{value}" for key, value in records]
    return topic, lines


def assert_partition_order(lines: list[str]) -> None:
    """Within a partition, records come in offset order."""
    for p in range(PARTITIONS):
        mine = [int(line.split("-")[-1]) for line in lines if line.startswith(f"k{p}|")]
        assert mine == sorted(mine), lines


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_two_runs_of_a_group_print_every_record_once(group_broker, protocol):
    bootstrap = group_broker.bootstrap
    topic, expected = filled_topic(bootstrap)
    group = topic_name(f"g-{protocol}")
    common = [
        "consume",
        "--topic",
        topic,
        "--group",
        group,
        "--group-protocol",
        protocol,
        "--from-beginning",
        "--print-key",
        "--key-separator",
        "|",
        "--bootstrap-server",
        bootstrap,
    ]
    # 12 is not a whole poll: the first run must commit up to its 12th record, not what it fetched.
    first = onceflow(*common, "--max-messages", "12", "--timeout", "20")
    assert first.returncode == 0, first.stderr
    assert "consumed 12 record(s)" in first.stderr
    first_lines = first.stdout.splitlines()
    assert len(first_lines) == 12

    # --from-beginning only applies without a committed offset: the group continues where it stopped.
    second = onceflow(*common, "--max-messages", str(PARTITIONS * PER_PARTITION), "--timeout", "3")
    assert second.returncode == 0, second.stderr
    second_lines = second.stdout.splitlines()
    assert len(second_lines) == PARTITIONS * PER_PARTITION - 12, second.stderr
    assert "consumed 18 record(s)" in second.stderr

    assert sorted(first_lines + second_lines) == sorted(expected)  # each record once, none skipped
    assert_partition_order(first_lines + second_lines)

    third = onceflow(*common, "--timeout", "1")
    assert third.returncode == 0, third.stderr
    assert third.stdout == "" and "consumed 0 record(s)" in third.stderr


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_ctrl_c_commits_what_was_printed(group_broker, protocol):
    bootstrap = group_broker.bootstrap
    topic, expected = filled_topic(bootstrap)
    group = topic_name(f"g-int-{protocol}")
    args = ["consume", "--topic", topic, "--group", group, "--group-protocol", protocol]
    proc = subprocess.Popen(
        [sys.executable, "-m", "onceflow", *args, "--from-beginning", "--bootstrap-server", bootstrap],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 30
        while len(lines) < len(expected) and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.rstrip("\n"))
        assert sorted(lines) == sorted(v.split("|")[1] for v in expected)
        proc.send_signal(signal.SIGINT)  # waiting for more: stops, commits, leaves the group
        out, errors = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, errors
    assert out == "" and f"consumed {len(expected)} record(s)" in errors
    assert "Traceback" not in errors and "Task was destroyed" not in errors

    with SimpleClient(bootstrap) as client:
        client.produce(topic, [(None, "late-1"), (None, "late-2")])
    after = onceflow(*args, "--timeout", "2", "--bootstrap-server", bootstrap)
    assert after.returncode == 0, after.stderr
    assert sorted(after.stdout.splitlines()) == ["late-1", "late-2"]


def test_read_committed_in_a_group(group_broker):
    bootstrap = group_broker.bootstrap
    topic = topic_name("consume-group-txn")
    with SimpleClient(bootstrap) as client:
        client.create_topic(topic, partitions=1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic_name("cli-txn")})
    try:
        producer.init_transactions()
        for outcome in ("committed", "aborted", "committed-too"):
            producer.begin_transaction()
            producer.send(topic, value=outcome.encode())
            producer.flush()  # in the log before the abort marker, for read_uncommitted to see
            if outcome == "aborted":
                producer.abort_transaction()
            else:
                producer.commit_transaction()
    finally:
        producer.close()

    def run(group: str, level: str) -> list[str]:
        result = onceflow(
            "consume",
            "--topic",
            topic,
            "--group",
            group,
            "--from-beginning",
            "--isolation-level",
            level,
            "--timeout",
            "2",
            "--bootstrap-server",
            bootstrap,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()

    assert run(topic_name("g-rc"), "read_committed") == ["committed", "committed-too"]
    assert run(topic_name("g-ru"), "read_uncommitted") == ["committed", "aborted", "committed-too"]


# -- the commit logic against a stand-in consumer (no broker) -------------------------------------


class FakeConsumer:
    """Answers every poll with the same batch, ignoring max_records (a batch bigger than asked for);
    remembers the commits and how it was closed."""

    made: list[FakeConsumer] = []
    batch: list = []
    commit_error: Exception | None = None

    def __init__(self, *topics, config):
        self.topics, self.config = topics, config
        self.commits: list[dict] = []
        self.closed_with = None
        self.polls = 0
        FakeConsumer.made.append(self)

    def poll(self, timeout_ms=0, max_records=None):
        self.polls += 1
        return self.batch if self.polls == 1 else []

    def group_metadata(self) -> ConsumerGroupMetadata:
        return ConsumerGroupMetadata("g", 1, "member-1", None)  # joined

    def commit(self, offsets=None):
        if self.commit_error is not None:
            raise self.commit_error
        self.commits.append(dict(offsets))

    def close(self, *, autocommit=True):
        self.closed_with = autocommit


class FakeSimpleClient:
    def __init__(self, bootstrap, security=None):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        pass

    def describe_topic(self, name):
        return None, {}


def record(partition: int, offset: int) -> ConsumerRecord:
    return ConsumerRecord("t", partition, offset, 0, None, f"p{partition}@{offset}".encode(), [])


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setattr("onceflow.client.consumer.Consumer", FakeConsumer)
    monkeypatch.setattr("onceflow.cli.consume.SimpleClient", FakeSimpleClient)
    FakeConsumer.made = []
    FakeConsumer.commit_error = None
    FakeConsumer.batch = [record(0, 5), record(1, 7), record(0, 6), record(1, 8), record(0, 7)]
    return FakeConsumer


def consume(*args: str):
    return CliRunner().invoke(cli, ["consume", "--topic", "t", "--group", "g", "--timeout", "0.2", *args])


def test_max_messages_commits_up_to_the_last_printed_record(fake):
    result = consume("--max-messages", "3", "--group-protocol", "consumer", "--from-beginning")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["p0@5", "p1@7", "p0@6"]
    (consumer,) = fake.made
    assert consumer.commits == [{TopicPartition("t", 0): 7, TopicPartition("t", 1): 8}]
    assert consumer.closed_with is False  # closing must not commit the positions of unprinted records
    assert consumer.config["enable.auto.commit"] is False
    assert consumer.config["group.id"] == "g" and consumer.config["group.protocol"] == "consumer"
    assert consumer.config["auto.offset.reset"] == "earliest"


def test_defaults_are_classic_and_latest(fake):
    result = consume("--isolation-level", "read_committed")
    assert result.exit_code == 0, result.output
    (consumer,) = fake.made
    assert consumer.config["group.protocol"] == "classic"
    assert consumer.config["auto.offset.reset"] == "latest"
    assert consumer.config["isolation.level"] == "read_committed"
    assert consumer.commits == [{TopicPartition("t", 0): 8, TopicPartition("t", 1): 9}]


class InterruptAfter(list):
    """A poll's batch that delivers SIGINT (Ctrl-C) once ``n`` of its records have been handed out."""

    def __init__(self, records, n):
        super().__init__(records)
        self.n = n

    def __iter__(self):
        for i, item in enumerate(list.__iter__(self)):
            if i == self.n:
                signal.raise_signal(signal.SIGINT)
            yield item


def test_ctrl_c_in_a_batch_commits_only_the_printed_records(fake):
    fake.batch = InterruptAfter(fake.batch, 2)
    result = consume()
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["p0@5", "p1@7"]
    (consumer,) = fake.made
    assert consumer.commits == [{TopicPartition("t", 0): 6, TopicPartition("t", 1): 8}]
    assert consumer.polls == 1
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_a_refused_commit_is_reported_in_one_line(fake):
    fake.commit_error = CommitFailed("the group rebalanced", None)
    result = consume("--max-messages", "2")
    assert result.exit_code == 1
    assert "could not commit 2 printed record(s) to group 'g' (REBALANCE_IN_PROGRESS)" in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: 2 printed record(s) were not committed to group 'g'; its next run may print them again"
    )
