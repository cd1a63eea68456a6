"""The console in a real headless browser (Debian's Chromium driven by Playwright) against a real standalone.

While a Pulsar producer keeps publishing, the overview lists the topic and its rates and
charts move; the topic page shows its subscription with a backlog, the consumer and the
producer, and its built-in table once compacted; the Kafka groups page shows a confluent-kafka group with its committed offset
and lag, its markup-looking id as plain text. No page logs a JavaScript error.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor

import pulsar
import pytest
from confluent_kafka import Consumer, Producer
from playwright.sync_api import expect, sync_playwright

from tests.waiting import wait_until

from .conftest import compact_now, get_json

TIMEOUT_MS = 60_000  # a deadline, not a pause: every wait below returns as soon as its condition holds
expect.set_options(timeout=TIMEOUT_MS)  # expect() has its own 5 s default, short on a loaded machine


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("Chromium is not installed (Debian package `chromium`; `make test` installs it)", pytrace=False)
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=chromium, headless=True)
        yield instance
        instance.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.errors = []
    page.on("console", lambda message: page.errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    yield page
    context.close()


class Traffic:
    """A Pulsar producer publishing until stopped, and a subscriber that receives without acknowledging."""

    def __init__(self, url: str, topic: str, subscription: str) -> None:
        self.client = pulsar.Client(url)
        self.consumer = self.client.subscribe(topic, subscription, consumer_name="console-reader",
                                              receiver_queue_size=10)
        self.producer = self.client.create_producer(topic, producer_name="console-writer")
        self.stop = threading.Event()
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            self.producer.send(f"message {self.sent}".encode())
            self.sent += 1
            self.stop.wait(0.02)  # a steady rate, not a synchronisation

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        self.client.close()


@pytest.fixture(scope="module")
def traffic(node):
    topic = f"persistent://public/default/live-{uuid.uuid4().hex[:6]}"
    running = Traffic(node.url, topic, "console-sub")
    running.topic = topic
    yield running
    running.close()


@pytest.fixture(scope="module")
def kafka_group(node):
    topic, group = f"clicks-{uuid.uuid4().hex[:6]}", "<b>dashboard</b> readers"
    producer = Producer({"bootstrap.servers": node.bootstrap})
    for i in range(30):
        producer.produce(topic, f"c{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = 0
    for _ in range(600):
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            got += 1
            if got == 10:
                break
    assert got == 10
    consumer.commit(asynchronous=False)
    yield topic, group
    consumer.close()


def _number(selector: str) -> str:
    """A JS expression: the number shown in the element at ``selector`` (NaN if absent)."""
    return f"Number((document.querySelector({selector!r}) || {{}}).textContent?.replace(/,/g, ''))"


def test_overview_lists_the_topic_and_its_rates_and_charts_update(node, page, traffic):
    page.goto(node.http + "/console")
    expect(page.locator("#brokers-table")).to_contain_text("(this broker)")
    expect(page.locator("#brokers-table")).to_contain_text("active")
    row = page.locator(f'tr[data-topic="{traffic.topic}"]')
    expect(row).to_be_visible()
    expect(row.get_by_role("link")).to_have_text(traffic.topic)
    page.wait_for_function(_number(f'tr[data-topic="{traffic.topic}"] td.rate-in') + " > 0")
    page.wait_for_function(_number(f'tr[data-topic="{traffic.topic}"] td.backlog') + " > 0")
    # The traffic chart keeps taking the broker's new samples and plots the rate the topics report.
    last = int(page.locator("#chart-traffic").get_attribute("data-last-time"))
    page.wait_for_function(f"Number(document.querySelector('#chart-traffic').dataset.lastTime) >= {last + 6000}")
    page.wait_for_function("Number(document.querySelector('#chart-traffic').dataset.lastIn) > 0")
    expect(page.locator("#chart-traffic polyline[data-series=in]")).to_have_count(1)
    assert page.errors == []


def test_charts_open_full_with_the_brokers_recent_samples(node, page, traffic):
    history = "/console/api/history/persistent/public/default/" + traffic.topic.rsplit("/", 1)[1]
    wait_until(lambda: len([s for s in get_json(node, history)[1]["samples"] if s[1] > 0]) >= 4,
               "four samples of the topic's traffic")
    for url, chart in ((node.http + "/console#/topic/" + urllib.parse.quote(traffic.topic, safe=""), "chart-topic-rates"),
                       (node.http + "/console", "chart-traffic")):
        page.goto(url)
        drawn = f"Number(document.querySelector('#{chart}')?.dataset.points)"
        page.wait_for_function(drawn + " > 0")
        assert page.evaluate(drawn) >= 4  # at its first drawing, not after four polls
        assert len(page.locator(f"#{chart} polyline[data-series=in]").get_attribute("points").split()) >= 4
    assert page.errors == []


def test_topic_page_shows_subscription_backlog_consumer_producer_and_live_chart(node, page, traffic):
    page.goto(node.http + "/console")
    page.locator(f'tr[data-topic="{traffic.topic}"] a').click()
    expect(page).to_have_url(node.http + "/console#/topic/" + urllib.parse.quote(traffic.topic, safe=""))
    expect(page.locator("#topic-name")).to_have_text(traffic.topic)
    sub = page.locator('tr[data-subscription="console-sub"]')
    expect(sub).to_be_visible()
    expect(sub).to_contain_text("Exclusive")
    page.wait_for_function(_number('tr[data-subscription="console-sub"] td.backlog') + " > 0")
    page.wait_for_function(_number("#topic-backlog") + " > 0")
    expect(page.locator('tr[data-consumer="console-reader"]')).to_be_visible()
    expect(page.locator('tr[data-producer="console-writer"]')).to_be_visible()
    # Rates and the chart move while the producer runs: more samples, a positive rate in, more published.
    published = page.evaluate(_number("#topic-msg-in"))
    last = int(page.locator("#chart-topic-rates").get_attribute("data-last-time"))
    page.wait_for_function(f"Number(document.querySelector('#chart-topic-rates').dataset.lastTime) >= {last + 6000}")
    page.wait_for_function("Number(document.querySelector('#chart-topic-rates').dataset.lastIn) > 0")
    page.wait_for_function(_number("#topic-rate-in") + " > 0")
    page.wait_for_function(_number("#topic-msg-in") + f" > {published}")
    # Its built-in table: nothing compacted yet (the standalone runs no compaction worker here).
    expect(page.locator("#builtin-table")).to_contain_text("public.default." + traffic.topic.rsplit("/", 1)[1])
    expect(page.locator("#table-note")).to_contain_text("compaction worker")
    assert page.errors == []


def test_kafka_groups_page_shows_group_members_offsets_and_lag_as_text(node, page, kafka_group):
    topic, group = kafka_group
    page.goto(node.http + "/console#/groups")
    section = page.locator("section.group").filter(has=page.get_by_role("heading", name=group, exact=True))
    expect(section).to_be_visible()
    expect(section).to_contain_text("Stable")
    expect(section.locator("tr[data-member]")).to_have_count(1)
    expect(section.locator("tr[data-member]")).to_contain_text(f"{topic} [0]")
    offsets = section.locator(f'tr[data-partition="{topic}:0"]')
    expect(offsets.locator("td").nth(2)).to_have_text("10")
    expect(offsets.locator("td").nth(3)).to_have_text("30")
    expect(offsets.locator("td.lag")).to_have_text("20")
    # The id's markup is shown, not interpreted.
    assert page.locator("#groups b").count() == 0
    assert page.errors == []


def test_topic_page_shows_its_builtin_table(node, page):
    pytest.importorskip("pyiceberg")  # the lakehouse extra, part of the test extra
    topic = f"persistent://public/default/lake-{uuid.uuid4().hex[:6]}"
    client = pulsar.Client(node.url)
    try:
        producer = client.create_producer(topic)
        for i in range(40):
            producer.send(f"row {i}".encode())
    finally:
        client.close()
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API already runs an event loop on this thread
        pool.submit(asyncio.run, compact_now(node, topic)).result()
    page.goto(node.http + "/console#/topic/" + urllib.parse.quote(topic, safe=""))
    covered = page.locator("#covered-offsets tbody tr")
    expect(covered).to_have_count(1)
    expect(covered).to_contain_text("(not partitioned)")
    ranges = covered.locator("td").nth(1).inner_text()
    assert ranges.startswith("[0, ")
    snapshot = page.locator("#snapshots tbody tr")
    expect(snapshot).to_have_count(1)
    expect(snapshot).to_contain_text("(current)")
    expect(snapshot).to_contain_text("append")
    expect(snapshot).to_contain_text("-1: " + ranges)
    expect(page.locator("#data-files tbody tr")).to_have_count(1)
    expect(page.locator("#data-files tbody tr code")).to_contain_text("/compacted/")
    # Its first rows, read from the current snapshot.
    rows = page.locator("#table-rows tbody tr")
    expect(rows).to_have_count(20)
    expect(rows.first.locator("td").nth(1)).to_have_text("0")
    expect(rows.first.locator("td code")).to_have_text("row 0")
    expect(rows.last.locator("td code")).to_have_text("row 19")
    assert page.errors == []


def test_a_partitioned_topic_is_one_row_with_its_partitions_summed(node, page, kafka_group):
    topic = "persistent://public/default/" + kafka_group[0]  # Kafka creates partitioned topics
    page.goto(node.http + "/console")
    row = page.locator(f'tr[data-topic="{topic}"]')
    expect(row).to_be_visible()
    expect(page.locator(f'tr[data-topic="{topic}-partition-0"]')).to_have_count(0)
    row.get_by_role("link").click()
    expect(page.locator("#topic-name")).to_have_text(topic)
    expect(page.locator("#topic-partitions")).to_have_text("1")
    page.wait_for_function(_number("#topic-msg-in") + " >= 30")  # the Kafka producer's messages, over its partitions
    expect(page.locator("#builtin-table")).to_contain_text("public.default." + kafka_group[0])
    assert page.errors == []


def test_group_types_and_a_topics_kafka_groups_with_their_lag(node, page, kafka_group):
    from confluent_kafka import TopicPartition

    topic, group = kafka_group
    kip848 = f"kip848-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": kip848, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "group.protocol": "consumer"})
    try:
        consumer.subscribe([topic])
        wait_until(lambda: (lambda m: m is not None and m.error() is None)(consumer.poll(0.1)), "a message")
        consumer.commit(offsets=[TopicPartition(topic, 0, 25)], asynchronous=False)
        page.goto(node.http + "/console#/groups")
        for name, label in ((group, "classic"), (kip848, "consumer (KIP-848)")):
            section = page.locator("section.group").filter(has=page.get_by_role("heading", name=name, exact=True))
            expect(section.locator(".group-type")).to_have_text(label)
        page.goto(node.http + "/console#/topic/" + urllib.parse.quote("persistent://public/default/" + topic, safe=""))
        for name, label, lag in ((group, "classic", "20"), (kip848, "consumer (KIP-848)", "5")):
            row = page.locator(f'#kafka-groups-table tr[data-kafka-group="{name}"]')
            expect(row.locator("td").nth(1)).to_have_text(label)
            expect(row.locator("td.lag")).to_have_text(lag)
            expect(row.locator("xpath=following-sibling::tr[1]").locator('tr[data-partition="0"] td.lag')).to_have_text(lag)
        expect(page.locator("#subscriptions")).to_contain_text("no subscriptions")
    finally:
        consumer.close()
    assert page.errors == []


def test_message_browser_shows_latest_messages_and_filters_by_key_and_offset(node, page):
    from pulsar.schema import AvroSchema, Integer, Record, String

    class Reading(Record):
        sensor = String()
        value = Integer()

    topic = f"persistent://public/default/readings-{uuid.uuid4().hex[:6]}"
    client = pulsar.Client(node.url)
    try:
        producer = client.create_producer(topic, schema=AvroSchema(Reading))
        for i in range(30):
            producer.send(Reading(sensor=f"s{i % 3}", value=i), partition_key=f"s{i % 3}", properties={"unit": "C"})
    finally:
        client.close()
    page.goto(node.http + "/console#/topic/" + urllib.parse.quote(topic, safe=""))
    rows = page.locator("#messages-table tbody tr")
    expect(rows).to_have_count(20)  # the latest 20 on opening
    expect(rows.first).to_have_attribute("data-offset", "10")
    expect(rows.last.locator("td.value")).to_have_text('{"sensor":"s2","value":29}')
    expect(rows.last.locator("td.key")).to_have_text("s2")
    expect(rows.last.locator("td.properties")).to_have_text("unit=C")
    expect(rows.last.locator("td.format")).to_have_text("avro v0")
    page.fill("#browse-key", "s1")
    page.fill("#browse-count", "100")
    page.click("#browse button[type=submit]")
    expect(rows).to_have_count(10)
    for i in range(10):
        expect(rows.nth(i)).to_have_attribute("data-offset", str(1 + 3 * i))
    page.fill("#browse-key", "")
    page.select_option("#browse-mode", "offset")
    page.fill("#browse-offset", "27")
    page.click("#browse button[type=submit]")
    expect(rows).to_have_count(3)
    expect(rows.first.locator("td.value")).to_have_text('{"sensor":"s0","value":27}')
    page.fill("#browse-partition", "5")
    page.click("#browse button[type=submit]")
    expect(page.locator("#messages-error")).to_have_text("partition 5 does not exist: the topic has no partitions")
    assert page.errors == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"]


def test_message_browser_shows_what_a_kafka_producer_wrote(node, page, kafka_group):
    topic = "persistent://public/default/" + kafka_group[0]
    page.goto(node.http + "/console#/topic/" + urllib.parse.quote(topic, safe=""))
    rows = page.locator("#messages-table tbody tr")
    expect(rows).to_have_count(20)
    expect(rows.last).to_have_attribute("data-offset", "29")
    expect(rows.last.locator("td.value")).to_have_text("c29")
    expect(rows.last.locator("td.format")).to_have_text("text")
    assert page.errors == []
