"""Running out of file descriptors: `onceflow serve` raises its soft limit to the hard one, and past the
hard limit a CreateTopics that cannot open its partitions is answered KAFKA_STORAGE_ERROR with nothing
half-made left behind (before: no answer, the connection closed, and the partitions opened so far stayed
open and on disk, so each retry leaked more descriptors)."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from tests.helpers.broker import LOOPBACK, ONCEFLOW_READY_LINE, free_port

from onceflow.broker.topics import TopicManager
from onceflow.protocol.errors import KafkaStorageError


def test_serve_raises_the_soft_limit_to_the_hard_one():
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip("the hard limit is too low to lower the soft one under it")
    code = (
        "import resource; from onceflow.broker.open_files import raise_open_file_limit; "
        "print(raise_open_file_limit(), resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    expected_soft = 1_048_576 if hard == resource.RLIM_INFINITY else hard
    assert out.strip() == f"(256, {expected_soft}) ({expected_soft}, {hard})"


def test_a_partition_that_cannot_be_opened_undoes_the_whole_topic(tmp_path):
    from onceflow.broker.topics import _default_log_opener

    opened = []

    def opener(directory: Path, overrides):
        if len(opened) == 2:
            raise OSError(errno.EMFILE, "Too many open files")
        log = _default_log_opener(directory, overrides)
        opened.append(log)
        return log

    topics = TopicManager(tmp_path, log_opener=opener)
    topics.load()
    with pytest.raises(KafkaStorageError, match="t-2: Too many open files"):
        topics.create_topic("t", 5)
    assert topics.get("t") is None
    assert not any(p.name.startswith("t-") for p in tmp_path.iterdir())
    assert all(log._closed for log in opened)
    opened.clear()
    topics.create_topic("u", 2)
    with pytest.raises(KafkaStorageError):
        topics.create_partitions("u", 6)  # the third new one fails
    assert len(topics.get("u").partitions) == 2
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("u-")) == ["u-0", "u-1"]


def _descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_out_of_descriptors_is_an_error_answer_and_the_broker_goes_on(tmp_path):
    port = free_port()
    log_path = tmp_path / "broker.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "onceflow", "serve", "--host", LOOPBACK, "--port", str(port)]
            + ["--data-dir", str(tmp_path / "data")],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            # A hard limit of 256: the broker cannot raise it, so 300 partitions cannot all be opened.
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)),
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 20
        while ONCEFLOW_READY_LINE not in log_path.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log_path.read_text()
            time.sleep(0.05)
        admin = AdminClient({"bootstrap.servers": f"{LOOPBACK}:{port}"})
        before = _descriptors(proc.pid)
        [future] = admin.create_topics([NewTopic("big", 300, 1)], request_timeout=30).values()
        with pytest.raises(Exception) as refused:
            future.result(30)
        assert "KAFKA_STORAGE_ERROR" in str(refused.value) and "Too many open files" in str(refused.value)
        assert _descriptors(proc.pid) <= before + 2  # nothing of the 300 stays open
        assert not list((tmp_path / "data").glob("big-*"))
        [future] = admin.create_topics([NewTopic("small", 10, 1)], request_timeout=30).values()
        future.result(30)
        assert "small" in admin.list_topics(timeout=10).topics
    finally:
        proc.kill()
        proc.wait()


def test_a_data_dir_whose_partitions_cannot_all_be_opened_is_refused_by_name(tmp_path):
    from onceflow.broker.data_dir_lock import DataDirUnusable
    from onceflow.broker.topics import _default_log_opener

    topics = TopicManager(tmp_path)
    topics.load()
    topics.create_topic("t", 4)
    topics.close()
    opened = []

    def opener(directory: Path, overrides):
        if len(opened) == 3:
            raise OSError(errno.EMFILE, "Too many open files")
        opened.append(_default_log_opener(directory, overrides))
        return opened[-1]

    restarted = TopicManager(tmp_path, log_opener=opener)
    with pytest.raises(DataDirUnusable, match=r"t-3: Too many open files \(each partition holds"):
        restarted.load()
    assert all(log._closed for log in opened) and restarted.get("t") is None
