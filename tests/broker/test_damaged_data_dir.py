"""A data dir whose own files (topics.json, meta.properties) do not read back stops the broker with a
message naming the file, instead of a traceback, a misleading config error or a silent new cluster."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from click.testing import CliRunner

from onceflow.broker.topics import DataDirDamaged
from onceflow.cli.main import cli

from .raw_client import running_broker


def make_data_dir(tmp_path) -> None:
    async def scenario():
        async with running_broker(tmp_path, single_node_files=True) as broker:
            broker.topics.create_topic("orders", 2)

    asyncio.run(scenario())


def start(tmp_path) -> None:
    async def scenario():
        async with running_broker(tmp_path):
            pass

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("file", "damage", "expected"),
    [
        ("topics.json", lambda text: text[: len(text) // 2], "JSONDecodeError"),
        ("topics.json", lambda text: json.dumps({"topics": [{"name": "orders"}]}), "KeyError"),
        (
            "topics.json",
            lambda text: json.dumps({"topics": [{"name": "o", "id": "nope", "partitions": 1}]}),
            "ValueError",
        ),
        ("meta.properties", lambda text: "version=1\n", "has no cluster.id"),
    ],
)
def test_a_damaged_file_of_the_data_dir_is_refused_by_name(tmp_path, file, damage, expected):
    make_data_dir(tmp_path)
    path = tmp_path / file
    path.write_text(damage(path.read_text()))
    with pytest.raises(DataDirDamaged, match=expected) as refused:
        start(tmp_path)
    assert str(path) in str(refused.value)

    result = CliRunner().invoke(cli, ["serve", "--port", "0", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert str(path) in result.output and "Traceback" not in result.output
    assert "--config" not in result.output  # not mistaken for a bad config value


def test_a_missing_partition_dir_is_reported_and_starts_empty(tmp_path, caplog):
    make_data_dir(tmp_path)
    for child in (tmp_path / "orders-1").iterdir():
        child.unlink()
    (tmp_path / "orders-1").rmdir()
    caplog.set_level(logging.WARNING, logger="onceflow.broker.topics")

    async def scenario():
        async with running_broker(tmp_path) as broker:
            assert broker.topics.get_partition("orders", 1).log.log_end_offset == 0

    asyncio.run(scenario())
    assert any("no directory for partition orders-1" in r.getMessage() for r in caplog.records)


def test_the_data_dir_of_another_node_is_refused_naming_its_node(tmp_path):
    # a cluster node's data dir (meta.properties says node.id=1) opened by a plain `onceflow serve`
    # (node 0) would join that node's metadata log as a stranger; Kafka refuses it too
    make_data_dir(tmp_path)
    meta = tmp_path / "meta.properties"
    assert "node.id=0" in meta.read_text()
    meta.write_text(meta.read_text().replace("node.id=0", "node.id=1"))
    result = CliRunner().invoke(cli, ["serve", "--port", "0", "--data-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "belongs to node 1, not to node 0" in result.output and "Traceback" not in result.output
