"""Kafka's quota arithmetic with an injected clock: the rate over sample windows, the minimum span a
first burst is judged over, windows aging out, and the throttle time that brings a rate back."""

from __future__ import annotations

import pytest

from onceflow.broker.sampled_rate import SampledRate, record_and_throttle_time_ms, throttle_time_ms


def test_a_first_burst_is_measured_over_all_but_one_window():
    rate = SampledRate(samples=11, window_ms=1000)
    rate.record(100, 0)
    assert rate.span_ms(0) == 10_000
    assert rate.rate(0) == pytest.approx(10.0)
    assert rate.span_ms(2500) == 2500 + 8000  # two whole windows passed: eight more assumed
    assert rate.rate(2500) == pytest.approx(100 / 10.5)


def test_a_steady_flow_measures_as_itself_and_old_windows_age_out():
    rate = SampledRate(samples=11, window_ms=1000)
    for ms in range(0, 30_000, 100):
        rate.record(100, ms)  # 1,000 a second
    assert rate.rate(29_900) == pytest.approx(1000, rel=0.1)
    assert rate.total(29_900 + 11_000) == 0  # nothing recorded for the whole horizon
    assert rate.rate(29_900 + 11_000) == 0


def test_throttle_time_is_what_brings_the_rate_back_to_the_bound():
    rate = SampledRate(samples=11, window_ms=1000)
    assert record_and_throttle_time_ms(rate, 50, 10.0, 0) == 0  # 5 a second: within
    # 200 over a 10 s span is 20 a second, twice the bound: (20 - 10) / 10 of the span, 10 s.
    assert record_and_throttle_time_ms(rate, 150, 10.0, 0) == 10_000
    # (As in Kafka, a first burst's span was padded to 10 s, so 10 s later it is still over; its
    # window leaves the horizon a second after.)
    assert throttle_time_ms(rate, 10.0, 11_000) == 0
    # In a steady flow, waiting what was asked brings the rate back to the bound.
    rate = SampledRate(samples=11, window_ms=1000)
    for ms in range(0, 20_000, 100):
        rate.record(1000, ms)  # 10,000 a second against a bound of 5,000
    wait = throttle_time_ms(rate, 5000.0, 19_900)
    assert wait > 0
    assert rate.rate(19_900 + wait) <= 5000 * 1.1


def test_a_window_needs_a_sample():
    with pytest.raises(ValueError):
        SampledRate(samples=0, window_ms=1000)
