"""Reading a broker's ``/metrics`` in tests, with ``prometheus_client``'s own parser."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families


class Scrape:
    """One reading: ``value(name, **labels)`` of a sample (0 when absent), ``families`` by name."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self._samples = {
            (s.name, frozenset(s.labels.items())): s.value for f in self.families.values() for s in f.samples
        }

    def value(self, name: str, **labels: str) -> float:
        return self._samples.get((name, frozenset(labels.items())), 0.0)

    def has(self, name: str, **labels: str) -> bool:
        return (name, frozenset(labels.items())) in self._samples

    def samples(self, name: str) -> list:
        return [s for f in self.families.values() for s in f.samples if s.name == name]


def scrape(port: int, host: str = "127.0.0.1") -> Scrape:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        return Scrape(response.read().decode())
