"""kcat (librdkafka's command-line tool) produces and consumes through the broker."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from tests.helpers.clients import adapter, create_topic

pytestmark = [
    pytest.mark.interop,
    # Tansu 0.6 answers the ApiVersions v3 of kcat's librdkafka 2.0.2 with a body it cannot read.
    pytest.mark.onceflow_only,
    pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed (apt-get install kcat)"),
]


def _kcat(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["kcat", "-X", "broker.address.family=v4", *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("codec", ("none", "gzip", "snappy", "lz4", "zstd"))
def test_kcat_produce_then_consume(broker, codec, unique_topic):
    create_topic(broker.bootstrap, unique_topic)
    lines = [f"key-{i}\tvalue number {i} " + "x" * (i % 50) for i in range(200)]
    produced = _kcat(
        "-P",
        "-b",
        broker.bootstrap,
        "-t",
        unique_topic,
        "-p",
        "0",
        "-K",
        "\t",
        "-z",
        codec,
        "-H",
        "origin=kcat",
        stdin=("\n".join(lines) + "\n").encode(),
    )
    assert produced.returncode == 0, produced.stderr.decode()

    consumed = _kcat(
        "-C", "-b", broker.bootstrap, "-t", unique_topic, "-p", "0", "-o", "beginning", "-e", "-J"
    )
    assert consumed.returncode == 0, consumed.stderr.decode()
    messages = [json.loads(line) for line in consumed.stdout.decode().splitlines() if line.strip()]

    assert [m["offset"] for m in messages] == list(range(len(lines)))
    assert [f"{m['key']}\t{m['payload']}" for m in messages] == lines
    assert all(m["headers"] == ["origin", "kcat"] for m in messages)


def test_kcat_reads_what_a_python_client_wrote(broker, unique_topic):
    create_topic(broker.bootstrap, unique_topic)
    from tests.helpers.clients import Sent

    sent = [Sent(f"k{i}".encode(), f"v{i}".encode(), (), 1_700_000_000_000 + i) for i in range(50)]
    adapter("aiokafka", broker.bootstrap).produce(unique_topic, sent, compression="lz4")

    consumed = _kcat(
        "-C", "-b", broker.bootstrap, "-t", unique_topic, "-p", "0", "-o", "10", "-e", "-f", "%o %k %s %T\\n"
    )
    assert consumed.returncode == 0, consumed.stderr.decode()
    rows = consumed.stdout.decode().split("\n")
    expected = [f"{i} k{i} v{i} {1_700_000_000_000 + i}" for i in range(10, 50)]
    assert [r for r in rows if r] == expected
