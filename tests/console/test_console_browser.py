"""The console in a real browser: ``onceflow console`` (a subprocess, --allow-writes) against one
broker, read with one headless Chromium (Debian's chromium + chromium-driver through Selenium).

Every page loads with no browser console error; the message browser shows records the test wrote
and, in read_committed mode, hides an aborted one while showing its marker; the transactions page
flags a hanging transaction and aborting it (through the confirmation page) moves the partition's
last stable offset; the charts draw from a Prometheus endpoint. Screenshots are saved under pytest's
tmp dir, or ``$ONCEFLOW_SCREENSHOT_DIR``; with ``$ONCEFLOW_DOCS_SCREENSHOT`` set, the message browser
is also saved there (docs/img/console.png is made that way).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from tests.broker.test_client_smoke import ThreadedBroker
from tests.helpers.broker import free_port
from tests.helpers.browser import chromium_paths, console_errors, headless_chromium, screenshot_dir
from tests.transactions import wire

from onceflow.client import Consumer, Producer
from onceflow.client.consumer.structs import TopicPartition
from onceflow.protocol.records import validate_produce_records

pytestmark = [
    pytest.mark.skipif(chromium_paths() is None, reason="needs Debian's chromium and chromium-driver"),
    pytest.mark.timeout(240),
]

BROWSE, STUCK, GROUP = "browse", "stuck", "browser-group"
HANGING_PID = 424_242


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with ThreadedBroker(tmp_path_factory.mktemp("console-browser")) as running:
        running.broker.topics.create_topic(BROWSE, 1)
        running.broker.topics.create_topic(STUCK, 1)
        _write_records(running.bootstrap)
        _leave_a_hanging_transaction(running)
        yield running


def _write_records(bootstrap: str) -> None:
    with Producer({"bootstrap.servers": bootstrap}) as plain:
        plain.send(BROWSE, b'{"order": 17, "item": "written-by-the-test"}', key=b"order-17")
        plain.flush()
    with Producer({"bootstrap.servers": bootstrap, "transactional.id": "browser-txn"}) as txn:
        txn.init_transactions()
        txn.begin_transaction()
        txn.send(BROWSE, b"committed-in-a-transaction")
        txn.commit_transaction()
        txn.begin_transaction()
        txn.send(BROWSE, b"aborted-in-a-transaction")
        txn.flush()
        txn.abort_transaction()
    consumer = Consumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False)
    try:
        consumer.commit({TopicPartition(BROWSE, 0): 1})
    finally:
        consumer.close()


def _leave_a_hanging_transaction(running) -> None:
    """Transactional data that no coordinator knows of (as after a lost coordinator state): appended
    on the broker's loop past the Produce path (where the coordinator would refuse it), so no marker
    will ever end it."""

    async def append():
        batch = wire.txn_batch([b"stuck"], HANGING_PID, 3, 0)
        partition = running.broker.topics.get_partition(STUCK, 0)
        return partition.append(validate_produce_records(bytearray(batch)))

    appended = asyncio.run_coroutine_threadsafe(append(), running._loop).result(10)
    assert appended.base_offset == 0


@pytest.fixture(scope="module")
def metrics_endpoint():
    """A stand-in for the broker's Prometheus endpoint, its counters moving at each scrape."""
    registry = CollectorRegistry()
    messages = Counter("kafka_server_brokertopicmetrics_messagesin", "in", registry=registry)
    bytes_in = Counter("kafka_server_brokertopicmetrics_bytesin", "in", registry=registry)
    lag = Gauge("kafka_consumergroup_lag", "lag", ["consumergroup", "topic", "partition"], registry=registry)

    class Moving(CollectorRegistry):
        def collect(self):
            messages.inc(500)
            bytes_in.inc(500_000)
            lag.labels(GROUP, BROWSE, "0").set(time.time() % 7)
            return registry.collect()

    server, _thread = start_http_server(0, addr="127.0.0.1", registry=Moving())
    yield f"http://127.0.0.1:{server.server_port}/metrics"
    server.shutdown()


@pytest.fixture(scope="module")
def console(broker, metrics_endpoint, tmp_path_factory):
    port = free_port()
    log_path = tmp_path_factory.mktemp("console") / "console.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "onceflow",
                "console",
                "--bootstrap-server",
                broker.bootstrap,
                "--port",
                str(port),
                "--allow-writes",
                "--metrics-url",
                metrics_endpoint,
                "--metrics-interval",
                "0.5",
            ],  # fmt: skip
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/static/console.css", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the console did not start:\n{log_path.read_text()}") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log_path.read_text(), log_path.read_text()


@pytest.fixture(scope="module")
def browser():
    with headless_chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return screenshot_dir(tmp_path_factory.mktemp("screenshots"))


def visit(browser, url: str, shots, name: str) -> None:
    browser.get(url)
    browser.save_screenshot(str(shots / f"{name}.png"))
    assert console_errors(browser) == [], f"browser console errors on {url}"
    assert "Traceback" not in browser.page_source


def text_of(browser, css: str) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.CSS_SELECTOR, css).text


def test_every_page_loads_without_console_errors(console, browser, shots):
    pages = {
        "overview": "/",
        "topics": "/topics",
        "topic": f"/topics/{BROWSE}",
        "messages": f"/topics/{BROWSE}/messages",
        "producers": f"/topics/{BROWSE}/producers",
        "groups": "/groups",
        "group": f"/groups/{GROUP}",
        "transactions": "/transactions",
    }
    for name, path in pages.items():
        visit(browser, console + path, shots, name)
        assert browser.find_element("css selector", "h1").text
    # An unknown topic: a page saying so; the browser logs the 404 of the page itself, nothing else.
    browser.get(f"{console}/topics/no-such-topic")
    browser.save_screenshot(str(shots / "not-found.png"))
    assert "does not exist" in text_of(browser, "#error")
    assert [e for e in console_errors(browser) if "status of 404" not in e] == []


def test_message_browser_shows_records_and_hides_the_aborted_one(console, browser, shots):
    from selenium.webdriver.common.by import By

    visit(browser, f"{console}/topics/{BROWSE}/messages", shots, "messages-uncommitted")
    table = text_of(browser, "#messages")
    assert "written-by-the-test" in table and "order-17" in table
    assert "committed-in-a-transaction" in table and "aborted-in-a-transaction" in table
    assert {
        m.text.split()[0] for m in browser.find_elements(By.CSS_SELECTOR, "tr.marker td:nth-child(3)")
    } == {
        "COMMIT",
        "ABORT",
    }
    browser.find_element(By.ID, "read-committed").click()
    browser.find_element(By.CSS_SELECTOR, "#query button[type=submit]").click()
    assert "isolation=read_committed" in browser.current_url
    browser.save_screenshot(str(shots / "messages-read-committed.png"))
    assert console_errors(browser) == []
    table = text_of(browser, "#messages")
    assert "written-by-the-test" in table and "committed-in-a-transaction" in table
    assert "aborted-in-a-transaction" not in table
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.marker.abort")) == 1  # the marker stays
    assert "1 aborted record(s) hidden" in text_of(browser, "#range")
    docs_path = os.environ.get("ONCEFLOW_DOCS_SCREENSHOT")
    if docs_path:
        browser.get(f"{console}/topics/{BROWSE}/messages")
        browser.save_screenshot(docs_path)


def test_hanging_transaction_is_flagged_and_aborting_it_moves_the_lso(console, browser, shots):
    from selenium.webdriver.common.by import By

    visit(browser, f"{console}/topics/{STUCK}", shots, "stuck-before")
    assert text_of(browser, "tr[data-partition='0'] td.hw") == "1"
    assert text_of(browser, "tr[data-partition='0'] td.lso").split()[0] == "0"

    visit(browser, f"{console}/transactions", shots, "transactions-hanging")
    row = browser.find_element(By.CSS_SELECTOR, f"#hanging tr[data-tp='{STUCK}-0']")
    assert str(HANGING_PID) in row.text
    row.find_element(By.CSS_SELECTOR, "a.abort").click()
    browser.save_screenshot(str(shots / "abort-confirmation.png"))
    assert "Abort a transaction?" in text_of(browser, "h1") and str(HANGING_PID) in browser.page_source
    browser.find_element(By.ID, "confirm").click()
    browser.save_screenshot(str(shots / "transactions-after-abort.png"))
    assert console_errors(browser) == []
    assert "aborted the transaction of producer" in text_of(browser, "#message")
    assert browser.find_elements(By.ID, "no-hanging")

    visit(browser, f"{console}/topics/{STUCK}", shots, "stuck-after")
    hw = int(text_of(browser, "tr[data-partition='0'] td.hw"))
    assert hw == 2  # the record and the abort marker
    assert text_of(browser, "tr[data-partition='0'] td.lso") == str(hw)


def test_charts_draw_from_the_metrics_endpoint(console, browser, shots):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{console}/charts")
    WebDriverWait(browser, 30).until(
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, "#throughput canvas")
            and d.find_elements(By.CSS_SELECTOR, "#lag-chart canvas")
        )
    )
    browser.save_screenshot(str(shots / "charts.png"))
    assert console_errors(browser) == []
    assert "messages in" in text_of(browser, "#throughput") and GROUP in text_of(browser, "#lag-chart")
