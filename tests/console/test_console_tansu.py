"""The console against Tansu (a Kafka-compatible broker in Rust): every page answers, with what
Tansu lacks shown as a note or an error page from the broker, never a 500 or a traceback."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from onceflow.client import AdminClient, Producer
from onceflow.console import ConsoleSettings, create_app

TOPIC = "console-tansu"


@pytest.fixture(scope="module")
def client(tansu):
    with AdminClient(tansu.bootstrap) as admin:
        admin.create_topic(TOPIC, partitions=1)
    with Producer({"bootstrap.servers": tansu.bootstrap}) as producer:
        producer.send(TOPIC, b'{"from": "tansu"}', key=b"k")
        producer.flush()
    with TestClient(create_app(ConsoleSettings(bootstrap=tansu.bootstrap))) as c:
        yield c


@pytest.mark.parametrize(
    "url",
    ["/", "/topics", f"/topics/{TOPIC}", f"/topics/{TOPIC}/producers", "/groups", "/transactions", "/charts"],
)
def test_pages_answer_against_tansu(client, url):
    response = client.get(url)
    assert response.status_code in (200, 502), response.text[:2000]
    assert "Traceback" not in response.text


def test_message_browser_reads_tansu(client):
    response = client.get(f"/topics/{TOPIC}/messages")
    assert response.status_code == 200 and "tansu" in response.text
    assert client.get("/topics/nothing-here").status_code == 404
