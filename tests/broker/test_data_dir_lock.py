"""One broker per data dir: the second is refused with a clear message, and the lock dies with its
holder, kill -9 included."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from onceflow.broker.config import BrokerConfig
from onceflow.broker.data_dir_lock import DataDirInUse, lock_data_dir
from onceflow.cli.main import cli
from onceflow.server.node import single_node

from .raw_client import running_broker


def test_a_second_lock_is_refused_naming_the_holder_until_released(tmp_path):
    held = lock_data_dir(tmp_path / "data")
    with pytest.raises(DataDirInUse, match=r"in use by another onceflow broker \(pid \d+\)"):
        lock_data_dir(tmp_path / "data")
    held.release()
    lock_data_dir(tmp_path / "data").release()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from onceflow.broker.data_dir_lock import lock_data_dir; "
            "lock_data_dir(Path(sys.argv[1])); print('locked', flush=True); time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(DataDirInUse, match=f"pid {holder.pid}"):
            lock_data_dir(tmp_path)
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        lock_data_dir(tmp_path).release()
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_second_broker_on_a_data_dir_is_refused_and_the_first_keeps_serving(tmp_path):
    async def scenario():
        async with running_broker(tmp_path) as first:
            second = single_node(BrokerConfig(port=0, data_dir=tmp_path))
            with pytest.raises(DataDirInUse):
                await second.start()
            assert first.topics.create_topic("still-mine", 1).name == "still-mine"
        # Stopped: the data dir is free again.
        async with running_broker(tmp_path) as again:
            assert again.topics.get("still-mine") is not None

    asyncio.run(scenario())


def test_serve_on_a_data_dir_in_use_says_so_and_exits_1(tmp_path):
    held = lock_data_dir(tmp_path)
    try:
        result = CliRunner().invoke(cli, ["serve", "--port", "0", "--data-dir", str(tmp_path)])
    finally:
        held.release()
    assert result.exit_code == 1
    assert "is in use by another onceflow broker" in result.output
    assert "Traceback" not in result.output
    # The failed start put the process's Ctrl-C handler back (uvloop's stayed installed before).
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_data_dir_that_cannot_be_made_is_reported_as_such_not_as_a_listen_failure(tmp_path):
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("not a directory")
    result = CliRunner().invoke(cli, ["serve", "--port", "0", "--data-dir", str(in_the_way / "data")])
    assert result.exit_code == 1
    assert f"cannot use {in_the_way / 'data'} as the data dir: Not a directory" in result.output
    assert "cannot serve on" not in result.output
