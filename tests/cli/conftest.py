"""Fixtures the CLI tests share."""

from __future__ import annotations

import pytest
from tests.helpers.broker import BrokerProcess


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    """A broker per module, tuned so that groups of either protocol settle fast."""
    proc = BrokerProcess(
        tmp_path_factory.mktemp("groups"),
        extra_args=[
            "--config",
            "group.initial.rebalance.delay.ms=0",  # a classic group forms at once
            "--config",
            "group.consumer.heartbeat.interval.ms=200",  # consumer-protocol members reconcile quickly
        ],
    )
    proc.start()
    yield proc
    proc.stop()
