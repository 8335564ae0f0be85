"""InitProducerId and DescribeProducers over the wire, against one broker process."""

from __future__ import annotations

import pytest
from tests.conftest import topic_name
from tests.helpers.broker import BrokerProcess
from tests.helpers.wire import WireClient

from onceflow.protocol.errors import ErrorCode

from .wire import batch, create_topic, describe_producers, init_producer_id, produce

pytestmark = pytest.mark.onceflow_only


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("onceflow"))
    proc.start()
    yield proc
    proc.stop()


def test_init_producer_id_hands_out_new_ids_at_epoch_0_in_every_version(server):
    seen = []
    with WireClient(server.bootstrap) as client:
        for version in range(6):
            response = init_producer_id(client, version)
            assert response.error_code == 0
            assert response.producer_epoch == 0
            seen.append(response.producer_id)
    assert len(set(seen)) == len(seen)
    assert seen == sorted(seen)


def test_producer_ids_never_repeat_across_clean_and_unclean_restarts(server):
    with WireClient(server.bootstrap) as client:
        before = {init_producer_id(client).producer_id for _ in range(3)}
    server.kill9()
    server.restart()
    with WireClient(server.bootstrap) as client:
        after_crash = {init_producer_id(client).producer_id for _ in range(3)}
    server.stop()
    server.start()
    with WireClient(server.bootstrap) as client:
        after_stop = {init_producer_id(client).producer_id for _ in range(3)}
    assert len(before | after_crash | after_stop) == 9
    assert min(after_crash) > max(before) and min(after_stop) > max(after_crash)


def test_describe_producers_lists_the_partition_producer_state(server):
    topic = topic_name("describe")
    with WireClient(server.bootstrap) as client:
        create_topic(client, topic, partitions=2)
        pid = init_producer_id(client).producer_id
        assert produce(client, topic, batch([b"a", b"b", b"c"], pid, 0, 0)).error_code == 0
        assert produce(client, topic, batch([b"d"], pid, 0, 3)).error_code == 0
        partitions = describe_producers(client, topic, [0, 1, 7])
    by_index = {p.partition_index: p for p in partitions}
    assert by_index[0].error_code == 0
    [state] = by_index[0].active_producers
    assert (state.producer_id, state.producer_epoch, state.last_sequence) == (pid, 0, 3)
    assert state.last_timestamp > 0
    assert state.current_txn_start_offset == -1
    assert by_index[1].error_code == 0 and by_index[1].active_producers == []
    assert by_index[7].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_describe_producers_of_an_unknown_topic(server):
    with WireClient(server.bootstrap) as client:
        [partition] = describe_producers(client, topic_name("nowhere"), [0])
    assert partition.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_cli_producers_describe(server):
    from click.testing import CliRunner

    from onceflow.cli.main import cli

    topic = topic_name("cli")
    with WireClient(server.bootstrap) as client:
        create_topic(client, topic)
        pid = init_producer_id(client).producer_id
        assert produce(client, topic, batch([b"x", b"y"], pid, 0, 0)).error_code == 0
    runner = CliRunner()
    args = ["producers", "describe", "--topic", topic, "--bootstrap-server", server.bootstrap]
    result = runner.invoke(cli, [*args, "--partition", "0"])
    assert result.exit_code == 0, result.output
    assert str(pid) in result.output and "producer id" in result.output
    missing = runner.invoke(cli, [*args, "--partition", "3"])
    assert missing.exit_code == 1
    assert "UNKNOWN_TOPIC_OR_PARTITION" in missing.output or "no partition" in missing.output
