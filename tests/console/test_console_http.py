"""The console over plain HTTP (Starlette's TestClient) against a real onceflow broker: every page
answers, bad input gets a clear page with a fitting status and never a traceback, writes need
--allow-writes, an unreachable broker is a 503 after which the console still serves, and the charts'
feed reads a Prometheus endpoint."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from starlette.testclient import TestClient
from tests.helpers.broker import free_port

from onceflow.client import AdminClient, Consumer, Producer
from onceflow.client.consumer.structs import TopicPartition
from onceflow.console import ConsoleSettings, create_app
from onceflow.console.metrics_feed import MetricsFeed, parse

pytestmark = pytest.mark.onceflow_only  # exact offsets and configs; test_console_tansu.py covers Tansu


@pytest.fixture(scope="module")
def data(broker):
    """A topic with JSON, text and binary records, and an empty group with committed offsets."""
    topic, group = "console-http", "console-http-group"
    with AdminClient(broker.bootstrap) as admin:
        admin.create_topic(topic, partitions=2)
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        producer.send(topic, json.dumps({"order": 1}).encode(), key=b"k1", partition=0, headers=[("h", b"x")])
        producer.send(topic, b"plain text", partition=0)
        producer.send(topic, b"\x00\xff\x10", partition=0)
        for i in range(10):
            producer.send(topic, b"r%d" % i, partition=1)
        producer.flush()
    consumer = Consumer(bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(topic, 1): 4})
    finally:
        consumer.close()
    return {"topic": topic, "group": group}


@pytest.fixture(scope="module")
def client(broker):
    with TestClient(create_app(ConsoleSettings(bootstrap=broker.bootstrap))) as c:
        yield c


@pytest.fixture(scope="module")
def writer(broker):
    with TestClient(create_app(ConsoleSettings(bootstrap=broker.bootstrap, allow_writes=True))) as c:
        yield c


def _ok(response, *texts: str) -> str:
    assert response.status_code == 200, response.text[:2000]
    assert "Traceback" not in response.text
    for text in texts:
        assert text in response.text
    return response.text


def test_every_page_answers(client, data):
    t, g = data["topic"], data["group"]
    _ok(client.get("/"), "Brokers", "controller")
    _ok(client.get("/topics"), t, "__consumer_offsets")
    page = _ok(client.get(f"/topics/{t}"), "Partitions", "cleanup.policy")
    assert 'class="hw">10<' in page and 'class="lso">10' in page  # partition 1: 10 records, no txn
    _ok(client.get(f"/topics/{t}/producers"), "producer id")
    _ok(client.get("/groups"), g)
    _ok(client.get(f"/groups/{g}"), 'class="lag">6<')  # committed 4 of 10
    _ok(client.get("/transactions"), "no hanging transactions")
    _ok(client.get("/charts"), "No metrics endpoint")
    assert client.get("/api/series").status_code == 404
    assert client.get("/static/uPlot.iife.min.js").status_code == 200


def test_message_browser_decodes_json_text_and_binary(client, data):
    page = _ok(client.get(f"/topics/{data['topic']}/messages", params={"partition": 0}))
    assert "&#34;order&#34;: 1" in page  # pretty-printed JSON (escaped in HTML)
    assert "plain text" in page
    assert "00 ff 10" in page  # not UTF-8: hex
    hexed = _ok(client.get(f"/topics/{data['topic']}/messages", params={"partition": 0, "format": "hex"}))
    assert "70 6c 61 69 6e" in hexed  # "plain" as hex
    window = _ok(
        client.get(f"/topics/{data['topic']}/messages", params={"partition": 1, "offset": 7, "limit": 2})
    )
    assert (
        window.count('class="record"') == 2
        and 'data-offset="7"' in window
        and 'data-offset="9"' not in window
    )
    by_time = _ok(client.get(f"/topics/{data['topic']}/messages", params={"partition": 1, "timestamp": "0"}))
    assert 'data-offset="0"' in by_time


@pytest.mark.parametrize(
    ("url", "status", "says"),
    [
        ("/topics/no-such-topic", 404, "does not exist"),
        ("/topics/no-such-topic/messages", 404, "does not exist"),
        ("/topics/no-such-topic/producers", 404, "does not exist"),
        ("/groups/no-such-group", 404, "does not exist"),
        ("/topics/console-http/messages?offset=abc", 400, "offset must be a whole number"),
        ("/topics/console-http/messages?offset=-3", 400, "offset must be at least 0"),
        ("/topics/console-http/messages?partition=9", 400, "partition 9 does not exist"),
        ("/topics/console-http/messages?timestamp=yesterday", 400, "timestamp must be"),
        ("/topics/console-http/messages?format=xml", 400, "format must be one of"),
        ("/topics/console-http/messages?limit=0", 400, "limit must be at least 1"),
        ("/no/such/page", 404, "Not Found"),
        ("/transactions/abort?topic=x&partition=0&producer_id=1&producer_epoch=0", 403, "--allow-writes"),
    ],
)
def test_bad_input_gets_a_clear_page(client, data, url, status, says):
    response = client.get(url)
    assert response.status_code == status
    assert says in response.text
    assert "Traceback" not in response.text and 'id="error"' in response.text


def test_writes_are_refused_read_only_and_checked_when_allowed(client, writer, data):
    assert (
        client.post(f"/groups/{data['group']}/reset-offsets", data={"topic": data["topic"]}).status_code
        == 403
    )
    response = writer.get("/transactions/abort?topic=x&partition=zero&producer_id=1&producer_epoch=0")
    assert response.status_code == 400 and "whole numbers" in response.text
    response = writer.post(
        f"/groups/{data['group']}/reset-offsets", data={"topic": data["topic"], "mode": "x"}
    )
    assert response.status_code == 400


def test_reset_offsets_of_an_empty_group(writer, broker, data):
    g, t = data["group"], data["topic"]
    response = writer.post(
        f"/groups/{g}/reset-offsets", data={"topic": t, "mode": "latest"}, follow_redirects=False
    )
    assert response.status_code == 303
    page = _ok(writer.get(response.headers["location"]), "reset to latest")
    assert 'class="lag">0<' in page
    with AdminClient(broker.bootstrap) as admin:
        offsets = admin.list_group_offsets(g)
    assert offsets[TopicPartition(t, 1)].offset == 10 and offsets[TopicPartition(t, 0)].offset == 3


def test_unreachable_broker_is_a_503_and_the_console_keeps_serving():
    app = create_app(ConsoleSettings(bootstrap=f"127.0.0.1:{free_port()}", request_timeout_ms=2000))
    with TestClient(app) as c:
        for url in ("/", "/topics", "/topics/x/messages?offset=1", "/groups/g", "/transactions"):
            response = c.get(url)
            assert response.status_code == 503, url
            assert "Broker unreachable" in response.text and "Traceback" not in response.text
        assert c.get("/static/console.css").status_code == 200
        assert c.get("/charts").status_code == 200  # needs no broker


def test_metrics_feed_reads_throughput_and_lag_from_prometheus():
    registry = CollectorRegistry()
    messages = Counter("kafka_server_brokertopicmetrics_messagesin", "in", ["topic"], registry=registry)
    lag = Gauge("kafka_consumergroup_lag", "lag", ["consumergroup", "topic", "partition"], registry=registry)
    messages.labels("a").inc(100)
    lag.labels("g1", "a", "0").set(5)
    lag.labels("g1", "a", "1").set(7)
    server, _thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    try:
        feed = MetricsFeed(f"http://127.0.0.1:{server.server_port}/metrics")

        async def twice() -> None:
            await feed.scrape_once()
            messages.labels("a").inc(50)
            messages.labels("b").inc(30)
            await feed.scrape_once()

        asyncio.run(twice())
    finally:
        server.shutdown()
    series = feed.series()
    assert feed.last_error == "" and len(series["times"]) == 1
    elapsed = feed.history[1].at - feed.history[0].at
    assert series["rates"]["messages_in"][0] == pytest.approx(80 / elapsed)
    assert series["lag"] == {"g1": [12.0]}
    # Without a topic label (the exporter's all-topics total), only that total counts.
    counters, _lag = parse(
        "# TYPE kafka_server_brokertopicmetrics_bytesin_total counter\n"
        'kafka_server_brokertopicmetrics_bytesin_total{topic="a"} 10\n'
        "kafka_server_brokertopicmetrics_bytesin_total 25\n"
    )
    assert counters == {"bytes_in": 25}


def test_metrics_feed_reports_an_unreachable_endpoint():
    feed = MetricsFeed(f"http://127.0.0.1:{free_port()}/metrics", timeout_s=2)
    asyncio.run(feed.scrape_once())
    assert "cannot read" in feed.last_error and feed.series()["times"] == []
