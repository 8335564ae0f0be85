"""``onceflow serve --metrics-port``: the endpoint a real broker process serves, and the one-line errors
for a metrics port that cannot be used."""

from __future__ import annotations

import os
import socket

import pytest
from click.testing import CliRunner
from tests.conftest import topic_name
from tests.helpers.broker import LOOPBACK, BrokerProcess, free_port
from tests.metrics.scrape import scrape

from onceflow.cli.main import cli
from onceflow.client.simple import SimpleClient

pytestmark = pytest.mark.timeout(120)


def _start_time(pid: int) -> float:
    """A process's start, in seconds since the epoch, from /proc (as prometheus_client reads it)."""
    with open("/proc/stat") as f:
        boot = next(float(line.split()[1]) for line in f if line.startswith("btime"))
    with open(f"/proc/{pid}/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def test_a_taken_metrics_port_stops_the_start_with_a_clear_error(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind((LOOPBACK, 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(
            cli, ["serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--metrics-port", str(port)]
        )
    assert result.exit_code == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}: Address already in use" in result.output
    assert "Traceback" not in result.output
    # Nothing was left behind: the data dir's lock is free for the next start.
    again = CliRunner().invoke(
        cli, ["serve", "--port", "0", "--data-dir", str(tmp_path / "data"), "--metrics-port", "99999"]
    )
    assert again.exit_code == 2 and "99999" in again.output  # refused as an option, before starting


def test_the_metrics_port_cannot_be_the_brokers_own(tmp_path):
    result = CliRunner().invoke(
        cli, ["serve", "--port", "9555", "--data-dir", str(tmp_path), "--config", "metrics.port=9555"]
    )
    assert result.exit_code == 2
    assert "metrics.port 9555 is the broker's own port" in result.output


def test_a_broker_process_serves_its_metrics(tmp_path):
    port = free_port()
    broker = BrokerProcess(tmp_path, extra_args=["--metrics-port", str(port)])
    broker.start()
    try:
        topic = topic_name("proc")
        with SimpleClient(broker.bootstrap) as client:
            client.produce(topic, [(None, f"v{i}") for i in range(7)])
        reading = scrape(port)
        assert reading.value("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 7
        assert reading.value("kafka_server_kafkaserver_brokerstate") == 3
        assert reading.value("process_resident_memory_bytes") > 0
        # The process metrics are the broker process's (its start time, not this test's).
        assert reading.value("process_start_time_seconds") == pytest.approx(_start_time(broker.pid), abs=0.05)
        assert _start_time(broker.pid) != pytest.approx(_start_time(os.getpid()), abs=0.05)
        assert reading.value("process_open_fds") >= 3
    finally:
        broker.stop()
