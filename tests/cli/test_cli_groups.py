"""``onceflow groups list|describe|reset-offsets|delete`` in-process against one broker for the
module: the tables the commands print, and the one-line errors and exit statuses for what a user can
get wrong (a group with members, a missing group or topic, a bad choice of options, no broker)."""

from __future__ import annotations

import contextlib
import time

import pytest
from click.testing import CliRunner
from rich.console import Console
from tests.conftest import topic_name
from tests.helpers.broker import free_port

from onceflow.cli.main import cli
from onceflow.client import AdminClient, Consumer, Producer
from onceflow.client.consumer import OffsetAndMetadata
from onceflow.client.consumer import TopicPartition as TP
from onceflow.client.simple import SimpleClient

MEMBER_CLIENT_ID = "cli-groups-member"
PLAN_TITLE = "plan (use --execute to commit) for "


@pytest.fixture(scope="module")
def bootstrap(group_broker):
    return group_broker.bootstrap


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch):
    """Rich cuts cells to fit 80 columns when the output is not a terminal; member ids are longer."""
    monkeypatch.setattr("onceflow.cli.groups.out", Console(width=250, highlight=False, soft_wrap=True))


def groups(bootstrap: str, *args: str):
    return CliRunner().invoke(cli, ["groups", *args, "--bootstrap-server", bootstrap])


def rows(output: str) -> list[list[str]]:
    """The body rows of the tables printed, each a list of its cells."""
    return [
        [cell.strip() for cell in line.strip("│").split("│")]
        for line in output.splitlines()
        if line.startswith("│")
    ]


def filled_topic(bootstrap: str, counts: tuple[int, ...] = (5, 3, 0)) -> str:
    """A topic with ``counts[p]`` records in partition p."""
    topic = topic_name("grp")
    with SimpleClient(bootstrap) as client:
        client.create_topic(topic, partitions=len(counts))
        for p, n in enumerate(counts):
            if n:
                client.produce(topic, [(None, f"v{i}") for i in range(n)], partition=p)
    return topic


def commit(bootstrap: str, group: str, offsets: dict[TP, int]) -> None:
    """Commit from outside the group's membership (generation -1): the group stays Empty."""
    config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    with contextlib.closing(Consumer(config=config)) as consumer:
        consumer.assign(list(offsets))
        consumer.commit({tp: OffsetAndMetadata(offset) for tp, offset in offsets.items()})


def committed(bootstrap: str, group: str) -> dict[TP, int]:
    with AdminClient(bootstrap) as admin:
        return {tp: o.offset for tp, o in admin.list_group_offsets(group).items()}


@contextlib.contextmanager
def member(bootstrap: str, topic: str, group: str, protocol: str = "classic", partitions: int = 3):
    """A live member of ``group`` holding all ``partitions`` of ``topic`` (heartbeats go on in the
    consumer's own thread while the test runs commands)."""
    consumer = Consumer(
        topic,
        config={
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            "client.id": MEMBER_CLIENT_ID,
            "enable.auto.commit": False,
        },
    )
    try:
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < partitions:
            assert time.monotonic() < deadline, "the member got no partitions"
            consumer.poll(timeout_ms=200)
        consumer.poll(timeout_ms=500)  # the consumer protocol: the assignment acknowledged
        yield consumer
    finally:
        consumer.close(autocommit=False)


def test_list_shows_every_group_with_its_state_and_protocol_type(bootstrap):
    topic = filled_topic(bootstrap)
    empty, live = topic_name("list-a"), topic_name("list-b")
    commit(bootstrap, empty, {TP(topic, 0): 1})
    with member(bootstrap, topic, live):
        result = groups(bootstrap, "list")
    assert result.exit_code == 0, result.output
    listed = rows(result.output)
    # a group only ever committed to has no protocol type, as in Kafka
    assert [empty, "Empty", ""] in listed and [live, "Stable", "consumer"] in listed
    assert listed == sorted(listed)
    assert result.output.splitlines()[1].split() == ["┃", "group", "┃", "state", "┃", "protocol", "type", "┃"]


def test_describe_an_empty_group_shows_committed_offsets_log_ends_and_lag(bootstrap):
    topic, group = filled_topic(bootstrap), topic_name("desc-empty")
    commit(bootstrap, group, {TP(topic, 0): 2, TP(topic, 2): 0})
    result = groups(bootstrap, "describe", group)
    assert result.exit_code == 0, result.output
    # the header names the coordinator: the broker to watch (or kill) on a cluster
    assert result.output.splitlines()[0] == f"group {group}: Empty, coordinator 0 ({bootstrap})"
    # partition 1 has no committed offset and no owner: not shown
    assert rows(result.output) == [
        [topic, "0", "2", "5", "3", "-", "-", "-"],
        [topic, "2", "0", "0", "0", "-", "-", "-"],
    ]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_describe_a_live_group_names_the_owner_of_each_partition(bootstrap, protocol):
    topic, group = filled_topic(bootstrap), topic_name(f"desc-{protocol}")
    with member(bootstrap, topic, group, protocol) as consumer:
        consumer.commit({TP(topic, 0): OffsetAndMetadata(1)})
        identity = consumer.group_metadata()
        result = groups(bootstrap, "describe", group)
    assert result.exit_code == 0, result.output
    header = result.output.splitlines()[0]
    assert header.startswith(f"group {group}: Stable, assignor ")
    # the host column holds the member's address as the coordinator saw it
    assert [row[:7] for row in rows(result.output)] == [
        [topic, "0", "1", "5", "4", identity.member_id, MEMBER_CLIENT_ID],
        [topic, "1", "-", "3", "-", identity.member_id, MEMBER_CLIENT_ID],
        [topic, "2", "-", "0", "-", identity.member_id, MEMBER_CLIENT_ID],
    ]
    if protocol == "consumer":
        assert header.endswith(
            f", consumer protocol at group epoch {identity.generation_id}, coordinator 0 ({bootstrap})"
        )
        assert f"member {identity.member_id} at epoch {identity.generation_id}" in result.output
    else:
        assert header == f"group {group}: Stable, assignor range, coordinator 0 ({bootstrap})"
        assert " at epoch " not in result.output


def test_describe_a_group_that_does_not_exist(bootstrap):
    group = topic_name("desc-missing")
    result = groups(bootstrap, "describe", group)
    assert result.exit_code == 1, result.output
    assert f"consumer group '{group}' does not exist" in result.output


def test_describe_shows_no_committed_offset_where_a_transaction_holds_one(bootstrap):
    """The offsets read are the stable ones (require_stable): a partition with a transactional commit
    not yet ended shows no committed offset."""
    topic, group = filled_topic(bootstrap), topic_name("desc-txn")
    commit(bootstrap, group, {TP(topic, 0): 1, TP(topic, 1): 1})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic_name("desc-txn-id")})
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_offsets_to_transaction({(topic, 0): 3}, group)
        result = groups(bootstrap, "describe", group)
        producer.abort_transaction()
    finally:
        producer.close()
    assert result.exit_code == 0, result.output
    assert rows(result.output) == [
        [topic, "0", "-", "5", "-", "-", "-", "-"],
        [topic, "1", "1", "3", "2", "-", "-", "-"],
    ]


@pytest.fixture
def reset_case(bootstrap):
    """A topic with 5, 3 and 0 records whose partition 0 starts at 1 (records deleted), and an empty
    group that committed 2 on partition 0 only."""
    topic, group = filled_topic(bootstrap), topic_name("reset")
    with AdminClient(bootstrap) as admin:
        admin.delete_records({TP(topic, 0): 1})
    commit(bootstrap, group, {TP(topic, 0): 2})
    return topic, group


@pytest.mark.parametrize(
    "option, new",
    [
        (["--to-earliest"], ["1", "0", "0"]),
        (["--to-latest"], ["5", "3", "0"]),
        (["--to-offset", "4"], ["4", "3", "0"]),  # kept within [log start, log end]
        (["--to-offset", "0"], ["1", "0", "0"]),
        (["--shift-by", "-1"], ["1", "0", "0"]),  # from the committed offset, else from the log start
        (["--shift-by", "2"], ["4", "2", "0"]),
    ],
)
def test_reset_offsets_without_execute_shows_the_plan_and_commits_nothing(bootstrap, reset_case, option, new):
    topic, group = reset_case
    result = groups(bootstrap, "reset-offsets", group, "--topic", topic, *option)
    assert result.exit_code == 0, result.output
    assert PLAN_TITLE + group in result.output
    assert rows(result.output) == [
        [topic, "0", "2", new[0]],
        [topic, "1", "-", new[1]],
        [topic, "2", "-", new[2]],
    ]
    assert committed(bootstrap, group) == {TP(topic, 0): 2}


def test_reset_offsets_with_execute_commits_the_plan(bootstrap, reset_case):
    topic, group = reset_case
    result = groups(bootstrap, "reset-offsets", group, "--topic", topic, "--to-offset", "2", "--execute")
    assert result.exit_code == 0, result.output
    assert f"new offsets of {group}" in result.output and PLAN_TITLE not in result.output
    assert rows(result.output) == [[topic, "0", "2", "2"], [topic, "1", "-", "2"], [topic, "2", "-", "0"]]
    assert committed(bootstrap, group) == {TP(topic, 0): 2, TP(topic, 1): 2, TP(topic, 2): 0}
    result = groups(bootstrap, "reset-offsets", group, "--topic", topic, "--shift-by", "1", "--execute")
    assert result.exit_code == 0, result.output
    assert rows(result.output) == [[topic, "0", "2", "3"], [topic, "1", "2", "3"], [topic, "2", "0", "0"]]
    assert committed(bootstrap, group) == {TP(topic, 0): 3, TP(topic, 1): 3, TP(topic, 2): 0}


def test_reset_offsets_of_a_group_that_does_not_exist_creates_it(bootstrap):
    """As with Kafka's kafka-consumer-groups.sh: a group that does not exist is not active either."""
    topic, group = filled_topic(bootstrap), topic_name("reset-new")
    result = groups(bootstrap, "reset-offsets", group, "--topic", topic, "--to-latest", "--execute")
    assert result.exit_code == 0, result.output
    assert rows(result.output) == [[topic, "0", "-", "5"], [topic, "1", "-", "3"], [topic, "2", "-", "0"]]
    assert committed(bootstrap, group) == {TP(topic, 0): 5, TP(topic, 1): 3, TP(topic, 2): 0}
    assert [group, "Empty", ""] in rows(groups(bootstrap, "list").output)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_reset_offsets_refuses_a_group_with_members(bootstrap, protocol):
    topic, group = filled_topic(bootstrap), topic_name(f"reset-live-{protocol}")
    with member(bootstrap, topic, group, protocol) as consumer:
        consumer.commit({TP(topic, 0): OffsetAndMetadata(1)})
        refused = groups(bootstrap, "reset-offsets", group, "--topic", topic, "--to-latest", "--execute")
        planned = groups(bootstrap, "reset-offsets", group, "--topic", topic, "--to-latest")
    assert refused.exit_code == 1
    assert refused.output == f"Error: group {group} is Stable: stop its consumers before resetting\n"
    assert committed(bootstrap, group) == {TP(topic, 0): 1}
    # without --execute the plan is still shown
    assert planned.exit_code == 0 and PLAN_TITLE + group in planned.output


def test_reset_offsets_of_a_topic_that_does_not_exist(bootstrap):
    group, topic = topic_name("reset-no-topic"), topic_name("no-such-topic")
    result = groups(bootstrap, "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute")
    assert result.exit_code == 1
    assert result.output == f"Error: unknown topic {topic}; list topics with `onceflow topics list`\n"


@pytest.mark.parametrize(
    "options", [[], ["--to-earliest", "--to-offset", "3"], ["--shift-by", "1", "--to-latest"]]
)
def test_reset_offsets_takes_exactly_one_target(bootstrap, options):
    result = groups(bootstrap, "reset-offsets", "g", "--topic", "t", *options, "--execute")
    assert result.exit_code == 2
    assert "Error: give exactly one of --to-earliest, --to-latest, --to-offset, --shift-by" in result.output


def test_delete_says_for_each_group_whether_it_went(bootstrap):
    topic = filled_topic(bootstrap)
    empty, live, missing = topic_name("del-empty"), topic_name("del-live"), topic_name("del-missing")
    commit(bootstrap, empty, {TP(topic, 0): 1})
    with member(bootstrap, topic, live):
        result = groups(bootstrap, "delete", empty, live, missing)
        listed = [row[0] for row in rows(groups(bootstrap, "list").output)]
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        f"deleted group {empty}",
        f"could not delete group {live}: NON_EMPTY_GROUP (stop its consumers first)",
        f"could not delete group {missing}: GROUP_ID_NOT_FOUND",
    ]
    assert empty not in listed and live in listed
    assert committed(bootstrap, empty) == {}
    result = groups(bootstrap, "delete", live)
    assert result.exit_code == 0 and result.output == f"deleted group {live}\n"


@pytest.mark.parametrize(
    "args",
    [["list"], ["describe", "g"], ["delete", "g"], ["reset-offsets", "g", "--topic", "t", "--to-earliest"]],
)
def test_every_command_says_when_no_broker_listens(args):
    result = groups(f"127.0.0.1:{free_port()}", *args)
    assert result.exit_code == 1
    assert (
        result.output.startswith("Error: cannot connect") and "is `onceflow serve` running?" in result.output
    )


def test_describe_shows_offsets_of_a_topic_that_is_gone_with_no_log_end():
    """Offsets of a deleted topic (a data dir from before DeleteTopics removed them) used to fail the
    whole describe with "partition 1 does not exist"; they show with "-" as the log end instead."""
    import asyncio

    from onceflow.cli.groups import _offsets_and_log_ends
    from onceflow.client.admin import GroupDescription
    from onceflow.protocol.errors import ErrorCode, KafkaError

    class Admin:
        async def list_group_offsets(self, group_id, require_stable=False):
            return {TP("gone", 0): OffsetAndMetadata(100, ""), TP("here", 0): OffsetAndMetadata(4, "")}

        async def list_offsets(self, specs):
            if any(tp.topic == "gone" for tp in specs):
                raise KafkaError(
                    "topic 'gone' partition 0 does not exist", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
            return {tp: 10 for tp in specs}

    found = asyncio.run(_offsets_and_log_ends(Admin(), "g", GroupDescription("g", "Empty", "consumer", "")))
    assert found == {TP("gone", 0): (100, -1), TP("here", 0): (4, 10)}
