"""CLI argument handling, error messages and dump-log, through click's CliRunner (no broker)."""

import os
import socket
import subprocess
import sys
import uuid

import click
import pytest
from click.testing import CliRunner

from onceflow.cli.main import cli
from onceflow.cli.produce import lines_to_records
from onceflow.cli.serve import broker_config, dev_overrides
from onceflow.protocol.record_codec import encode_batch
from onceflow.protocol.records import build_control_batch

TS = 1_700_000_000_000


@pytest.fixture
def runner():
    return CliRunner()


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_help_lists_every_command(runner):
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in ("serve", "topics", "produce", "consume", "dump-log", "quickstart"):
        assert command in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["topics", "list"],
        ["topics", "create", "t"],
        ["consume", "--topic", "t", "--timeout", "1"],
        ["consume", "--topic", "t", "--group", "g", "--timeout", "1"],
    ],
)
def test_no_broker_gives_one_line_hint(runner, args):
    result = runner.invoke(cli, [*args, "--bootstrap-server", f"127.0.0.1:{unused_port()}"])
    assert result.exit_code == 1
    assert "is `onceflow serve` running?" in result.output
    assert "Traceback" not in result.output


def test_produce_without_broker(runner):
    port = unused_port()
    result = runner.invoke(
        cli, ["produce", "--topic", "t", "--bootstrap-server", f"127.0.0.1:{port}"], input="x\n"
    )
    assert result.exit_code == 1
    assert f"cannot connect to 127.0.0.1:{port}" in result.output


def test_bad_bootstrap_address(runner):
    result = runner.invoke(cli, ["topics", "list", "--bootstrap-server", "localhost"])
    assert result.exit_code == 1
    assert "expected HOST:PORT" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["produce"], "Missing option '--topic'"),
        (["produce", "--topic", "t", "--compression", "brotli"], "'brotli' is not one of"),
        (["consume", "--topic", "t", "--isolation-level", "dirty"], "'dirty' is not one of"),
        (["consume", "--topic", "t", "--group-protocol", "consumer"], "--group-protocol needs --group"),
        (["consume", "--topic", "t", "--group", "g", "--group-protocol", "eager"], "'eager' is not one of"),
        (["consume", "--topic", "t", "--group", " "], "--group: must not be empty"),
        (["topics", "create", "t", "--partitions", "0"], "--partitions"),
        (["topics", "create", "t", "--config", "noequals"], "is not KEY=VALUE"),
        (["serve", "--config", "no.such.setting=1"], "unknown broker config 'no.such.setting'"),
        (["serve", "--config", "num.partitions=many"], "num.partitions must be an integer"),
        (["serve", "--fault", "drop-request-before-append=often"], "fault probabilities must be numbers"),
        (["serve", "--port", "70000"], "--port"),
    ],
)
def test_usage_errors_exit_2_with_a_message(runner, args, message):
    result = runner.invoke(cli, args)
    assert result.exit_code == 2
    assert message in result.output


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--config", "no.such.setting=1"],
        ["serve", "--config", "num.partitions=many"],
        ["serve", "--config", "noequals"],
        ["quotas", "set", "--client", "c", "--add-config", "producer_byt_rate=1"],
    ],
)
def test_a_refused_value_is_one_line_without_the_usage(runner, args):
    result = runner.invoke(cli, args)
    assert result.exit_code == 2
    assert result.output.startswith("Error: Invalid value for --"), result.output
    assert result.output.count("\n") == 1, result.output


def test_a_port_in_use_is_refused_before_anything_is_written(runner, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(cli, ["serve", "--port", str(port), "--data-dir", str(tmp_path / "data")])
    assert result.exit_code == 1
    assert f"cannot serve on PLAINTEXT://127.0.0.1:{port}: address already in use" in result.output
    assert not (tmp_path / "data").exists()


def test_a_real_usage_error_keeps_clicks_usage_lines(runner):
    result = runner.invoke(cli, ["serve", "--no-such-option"])
    assert result.exit_code == 2
    assert "Usage: " in result.output and "No such option" in result.output


def test_a_misspelt_broker_config_is_refused_with_the_nearest_name(runner):
    result = runner.invoke(cli, ["serve", "--config", "num.partition=3"])
    assert result.exit_code == 2
    assert "unknown broker config 'num.partition'; did you mean 'num.partitions'?" in result.output
    assert "known:" not in result.output  # one line, not every name onceflow knows


def test_serve_help_configs_lists_every_setting_with_its_default(runner):
    result = runner.invoke(cli, ["serve", "--help-configs"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert "num.partitions=1" in lines and "auto.create.topics.enable=true" in lines
    assert any(line.startswith("controller.quorum.voters ") for line in lines)
    assert any(line.startswith("num.network.threads ") and "no effect" in line for line in lines)


def test_kafka_settings_that_mean_nothing_here_are_accepted(tmp_path):
    # the thread counts, socket buffers and internal replication factors of Kafka's sample
    # config/kraft/server.properties: such a file must run as it is
    from onceflow.cli.serve import no_effect_settings

    kafka_sample = {
        "num.network.threads": "3",
        "num.io.threads": "8",
        "socket.send.buffer.bytes": "102400",
        "socket.receive.buffer.bytes": "102400",
        "num.recovery.threads.per.data.dir": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "num.partitions": "2",
    }
    config = broker_config("127.0.0.1", 0, tmp_path, {}, kafka_sample)
    assert config.num_partitions == 2
    assert "num.network.threads" in no_effect_settings(kafka_sample)
    assert "num.partitions" not in no_effect_settings(kafka_sample)


def test_broker_config_uses_kafka_names(tmp_path):
    config = broker_config(
        "127.0.0.1",
        0,
        tmp_path,
        {"drop-response-after-append": "0.5"},
        {"num.partitions": "4", "auto.create.topics.enable": "false"},
    )
    assert config.num_partitions == 4
    assert config.auto_create_topics_enable is False
    assert config.faults == {"drop-response-after-append": 0.5}
    assert config.data_dir == tmp_path


def test_fetch_session_settings_use_kafka_names_and_defaults(tmp_path):
    default = broker_config("127.0.0.1", 0, tmp_path, {}, {})
    assert default.max_incremental_fetch_session_cache_slots == 1000
    assert default.min_incremental_fetch_session_eviction_ms == 120000
    names = {
        "max.incremental.fetch.session.cache.slots": "0",
        "min.incremental.fetch.session.eviction.ms": "5000",
    }
    config = broker_config("127.0.0.1", 0, tmp_path, {}, names)
    assert config.max_incremental_fetch_session_cache_slots == 0
    assert config.min_incremental_fetch_session_eviction_ms == 5000
    with pytest.raises(click.BadParameter, match="cache.slots must be >= 0"):
        broker_config("127.0.0.1", 0, tmp_path, {}, {"max.incremental.fetch.session.cache.slots": "-1"})


def test_dev_mode_forms_groups_at_once_unless_told_otherwise(tmp_path):
    dev = broker_config("127.0.0.1", 0, tmp_path, {}, dev_overrides({}))
    assert dev.group_initial_rebalance_delay_ms == 0
    explicit = dev_overrides({"group.initial.rebalance.delay.ms": "500"})
    assert broker_config("127.0.0.1", 0, tmp_path, {}, explicit).group_initial_rebalance_delay_ms == 500
    assert broker_config("127.0.0.1", 0, tmp_path, {}, {}).group_initial_rebalance_delay_ms == 3000


def test_lines_to_records_splits_on_the_first_separator():
    lines = ["k1:v1\n", "k2:v:2\n", "k3:\n"]
    assert list(lines_to_records(lines, ":")) == [(b"k1", b"v1"), (b"k2", b"v:2"), (b"k3", b"")]
    assert list(lines_to_records(["plain\r\n"], None)) == [(None, b"plain")]


def test_produce_rejects_a_line_without_the_separator():
    with pytest.raises(Exception, match="line 2 has no key separator"):
        list(lines_to_records(["a\tb\n", "no separator\n"], "\t"))


@pytest.fixture
def partition_dir(tmp_path):
    directory = tmp_path / "orders-0"
    directory.mkdir()
    first = encode_batch([(b"k", b"v"), (None, b"second")], timestamp_ms=TS)
    second = encode_batch(
        [(b"tx", b"in a transaction")],
        base_offset=2,
        compression=3,
        producer_id=7,
        producer_epoch=1,
        base_sequence=0,
        transactional=True,
        timestamp_ms=TS,
    )
    marker = build_control_batch(7, 1, commit=False, coordinator_epoch=4, timestamp_ms=TS, base_offset=3)
    (directory / f"{0:020d}.log").write_bytes(first + second)
    (directory / f"{3:020d}.log").write_bytes(marker + b"\x00\x01torn")
    (directory / f"{0:020d}.index").write_bytes(b"")
    return directory


def test_dump_log_prints_batches(runner, partition_dir):
    result = runner.invoke(cli, ["dump-log", str(partition_dir / f"{0:020d}.log")])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("baseOffset")]
    assert len(lines) == 2
    assert "baseOffset: 0 lastOffset: 1 count: 2" in lines[0]
    assert "compresscodec: none" in lines[0]
    assert "producerId: 7 producerEpoch: 1" in lines[1]
    assert "isTransactional: true isControl: false" in lines[1]
    assert "compresscodec: lz4" in lines[1]
    assert "| offset:" not in result.output


def test_dump_log_records_and_partition_directory(runner, partition_dir):
    result = runner.invoke(cli, ["dump-log", str(partition_dir), "--records"])
    assert result.exit_code == 0, result.output
    assert "| offset: 1 timestamp: 1700000000000 keySize: -1 valueSize: 6" in result.output
    assert "key: tx payload: in a transaction" in result.output
    assert "| offset: 3 endTxnMarker: ABORT coordinatorEpoch: 4" in result.output
    assert "the last 6 byte(s)" in result.output  # the torn tail of the second segment
    assert result.output.index(f"{0:020d}.log") < result.output.index(f"{3:020d}.log")


def test_dump_log_missing_path(runner, tmp_path):
    result = runner.invoke(cli, ["dump-log", str(tmp_path / "nope.log")])
    assert result.exit_code == 1
    assert "does not exist" in result.output
    result = runner.invoke(cli, ["dump-log", str(tmp_path)])
    assert result.exit_code == 1
    assert "no .log segment files" in result.output


# `pipeline run` up to its app, which each test names (with the options it tries).
PIPELINE_RUN = [
    "pipeline",
    "run",
    "--input",
    "in",
    "--output",
    "out",
    "--checkpoint",
    "/tmp/onceflow-never-made",
]
APP = ["--app", "tests.spark.apps:upper_values"]


def test_pipeline_run_without_a_broker_says_so_in_one_line(runner):
    result = runner.invoke(cli, [*PIPELINE_RUN, *APP, "--bootstrap", f"127.0.0.1:{unused_port()}"])
    assert result.exit_code == 1
    assert "is `onceflow serve` running?" in result.output
    assert "Traceback" not in result.output


def test_pipeline_run_checks_app_and_options_before_anything_starts(runner):
    port = ["--bootstrap-server", f"127.0.0.1:{unused_port()}"]
    # A misspelt function is named at once (it used to surface after ~20 s of Spark start-up).
    result = runner.invoke(cli, [*PIPELINE_RUN, "--app", "tests.spark.apps:no_such_function", *port])
    assert result.exit_code == 2
    assert "has no function 'no_such_function'" in result.output
    result = runner.invoke(cli, [*PIPELINE_RUN, *APP, "--source-option", "failOnDataLoss", *port])
    assert result.exit_code == 2
    assert "'failOnDataLoss' is not KEY=VALUE" in result.output
    # Options the source or the sink would refuse are named before Spark starts.
    result = runner.invoke(cli, [*PIPELINE_RUN, *APP, "--sink-option", "kafka.lingr.ms=20", *port])
    assert result.exit_code == 2
    assert "did you mean kafka.linger.ms?" in result.output
    result = runner.invoke(cli, [*PIPELINE_RUN, *APP, "--source-option", "startingOfsets=earliest", *port])
    assert result.exit_code == 2
    assert "did you mean startingOffsets?" in result.output
    # Well-formed options get as far as the broker check (none listens here).
    options = ["--source-option", "failOnDataLoss=false", "--sink-option", "kafka.linger.ms=20"]
    result = runner.invoke(cli, [*PIPELINE_RUN, *APP, *options, *port])
    assert result.exit_code == 1
    assert "is `onceflow serve` running?" in result.output


def test_pipeline_run_imports_the_app_from_the_current_directory(runner, tmp_path, monkeypatch):
    """As ``python -m`` would: the ``onceflow`` console script puts its own directory on sys.path, not
    the current one, so an app module next to the user could not be imported (exit 2, "cannot import")."""
    module = f"myapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text("def transform(df):\n    return df\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.setenv("PYTHONPATH", "")
    port = ["--bootstrap", f"127.0.0.1:{unused_port()}"]
    result = runner.invoke(cli, [*PIPELINE_RUN, "--app", f"{module}:transform", *port])
    assert result.exit_code == 1, result.output  # past the app, at the broker check
    assert "is `onceflow serve` running?" in result.output
    assert os.environ["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)  # Spark's workers import it too
    sys.modules.pop(module, None)


def test_spark_failure_cause_is_the_innermost_python_error():
    from onceflow.cli.pipeline import spark_failure_cause

    report = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: [PYTHON_STREAMING_DATA_SOURCE_RUNTIME_ERROR]"
        " Failed when Python streaming data source perform latestOffset: Traceback (most recent call last):\n"
        '  File "source.py", line 10, in latestOffset\n'
        "    raise BrokerConnectionError(msg)\n"
        "onceflow.client.connection.BrokerConnectionError: cannot connect to 127.0.0.1:1: Connection refused\n"
        "\n=== Streaming Query ===\nCurrent State: INITIALIZING\n"
    )
    assert spark_failure_cause(Exception(report)) == (
        "onceflow.client.connection.BrokerConnectionError: cannot connect to 127.0.0.1:1: Connection refused"
    )
    assert spark_failure_cause(Exception("something odd\nmore")) == "something odd"


def test_quickstart_counts_events_read_from_offsets_not_from_reports_a_kill_may_lose():
    """A kill -9 of the driver can lose the progress report of a batch Spark had finished: the count of
    events read comes from the last report's end offsets (here batch 1's report is missing)."""
    from onceflow.cli.quickstart import events_read

    def report(batch_id: int, rows: int, end: dict) -> dict:
        return {"batchId": batch_id, "numInputRows": rows, "sources": [{"endOffset": {"flights": end}}]}

    reports = [
        report(0, 10, {"0": 6, "1": 4}),
        report(2, 10, {"0": 16, "1": 14}),
        report(3, 5, {"0": 18, "1": 17}),
    ]
    assert events_read(reports) == 35  # not the 25 the surviving reports add up to
    assert events_read([]) == 0


def test_pipeline_run_hands_source_and_sink_options_to_the_pipeline(runner, monkeypatch):
    import onceflow.spark.pipeline as spark_pipeline

    seen = {}

    class FakeSpark:
        sparkContext = type("Context", (), {"setLogLevel": staticmethod(lambda level: None)})()

        def stop(self):
            seen["stopped"] = True

    def fake_run(config, spark, on_progress):
        seen["config"] = config
        on_progress({"batchId": 0, "numInputRows": 3})
        return [{"batchId": 0, "numInputRows": 3}]

    monkeypatch.setattr("onceflow.cli.pipeline._check_input_topic", lambda bootstrap, topic: None)
    monkeypatch.setattr(spark_pipeline, "make_spark_session", lambda *args, **kwargs: FakeSpark())
    monkeypatch.setattr(spark_pipeline, "run_pipeline", fake_run)
    options = ["--source-option", "failOnDataLoss=false", "--sink-option", "kafka.linger.ms=20"]
    result = runner.invoke(cli, [*PIPELINE_RUN, *APP, *options])
    assert result.exit_code == 0, result.output
    assert seen["config"].source_options == {"failOnDataLoss": "false"}
    assert seen["config"].sink_options == {"kafka.linger.ms": "20"}
    assert seen["stopped"] and "1 batches, 3 rows" in result.output


def test_a_table_piped_to_a_file_is_not_cut_to_80_columns():
    # `onceflow metadata-quorum describe --replication | grep ...` used to read "LastFetchTim…"
    script = (
        "from rich.table import Table\n"
        "from onceflow.cli.common import out\n"
        "table = Table()\n"
        "for i in range(5):\n"
        "    table.add_column(f'LastCaughtUpTimestamp{i}')\n"
        "table.add_row(*[f'{i} ms ago' for i in range(5)])\n"
        "out.print(table)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    printed = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60, check=True
    ).stdout
    assert all(f"LastCaughtUpTimestamp{i}" in printed for i in range(5)), printed
