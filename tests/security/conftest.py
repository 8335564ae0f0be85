"""One secured broker per test module (tests/helpers/secure_broker.py)."""

from __future__ import annotations

import pytest
from tests.helpers.secure_broker import SecureBroker


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory):
    broker = SecureBroker(tmp_path_factory.mktemp("secure"))
    broker.start()
    yield broker
    broker.stop()
