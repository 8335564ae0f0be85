"""The metrics endpoint's errors (importable without ``prometheus_client``)."""

from __future__ import annotations


class MetricsEndpointError(Exception):
    """The metrics endpoint cannot start (its port is taken, or ``prometheus_client`` is missing)."""
