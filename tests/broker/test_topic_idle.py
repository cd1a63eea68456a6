"""``--topic-idle-seconds``: a topic nobody uses is unloaded after that long; 0 keeps it loaded."""

from __future__ import annotations

import time

import pulsar

from tests.standalone_process import running
from tests.waiting import wait_until


def loaded(server, topic: str) -> bool:
    """A loaded topic has its traffic series; unloading drops them."""
    return f'pulsar_in_messages_total{{topic="{topic}"}}' in server.metrics()


def publish_one(server, topic: str) -> None:
    client = pulsar.Client(server.url)
    try:
        producer = client.create_producer(topic)
        producer.send(b"once")
        producer.close()
    finally:
        client.close()


def test_an_idle_topic_unloads_after_the_configured_seconds(tmp_path):
    topic = "persistent://public/default/idle-soon"
    with running(tmp_path / "data", ["--topic-idle-seconds", "1"]) as server:
        publish_one(server, topic)
        wait_until(lambda: not loaded(server, topic), f"{topic} unloaded", 30)


def test_zero_never_unloads(tmp_path):
    topic = "persistent://public/default/idle-never"
    with running(tmp_path / "data", ["--topic-idle-seconds", "0"]) as server:
        publish_one(server, topic)
        assert loaded(server, topic)
        time.sleep(3)  # three times what unloads a topic in the test above
        assert loaded(server, topic)
