"""Key compaction checked against a model, through the official clients of both protocols.

Shared by the crash test (``tests/topics/test_key_compaction_model.py``) and the
benchmark (``bench/topic_compaction.py``). An update is ``(key, value)``; an empty
Pulsar payload or a ``None`` Kafka value is a tombstone. The model of a compacted
topic is the latest update of each key, at its original id, unless it is a tombstone.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from nereus.meta import connect
from nereus.storage import key_view, records

from . import waiting

DEADLINE = 60.0  # bench/topic_compaction.py raises it for its scale


def wait_until(condition, what: str, timeout: float | None = None, interval: float = 0.05):
    """``waiting.wait_until`` with this module's ``DEADLINE``."""
    return waiting.wait_until(condition, what, DEADLINE if timeout is None else timeout, interval)


def updates(count: int, keys: int, *, tombstone_every: int = 11, seed: int = 13) -> list[tuple[bytes, bytes | None]]:
    """``count`` updates over ``keys`` keys; about one in ``tombstone_every`` is a tombstone (None)."""
    rng = random.Random(seed)
    out = []
    for i in range(count):
        key = b"key-%d" % rng.randrange(keys)
        out.append((key, None if rng.randrange(tombstone_every) == 0 else b"value-%d-" % i + b"x" * rng.randrange(40)))
    return out


def model(updates_: list, ids: list) -> list[tuple]:
    """(id, key, value) of what a compacted reader sees: latest per key, tombstoned keys absent, in id order."""
    latest = {}
    for i, (key, _value) in enumerate(updates_):
        latest[key] = i
    return [(ids[i], key, value) for i, (key, value) in enumerate(updates_) if latest[key] == i and value is not None]


# -- admin ---------------------------------------------------------------------------------
def admin(http: str, method: str, path: str, body=None) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{http}/admin/v2{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            text = response.read()
            return response.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def topic_path(topic: str) -> str:
    return "/persistent/public/default/" + topic.removeprefix("persistent://public/default/")


def trigger(http: str, topic: str) -> None:
    status, body = admin(http, "PUT", topic_path(topic) + "/compaction")
    assert status == 204, (status, body)


def compaction_status(http: str, topic: str, *, lease_conflicts: bool = False) -> str:
    """NOT_RUN, RUNNING or SUCCESS; ERROR raises, except with ``lease_conflicts`` when the error
    is the compaction lease of a compactor that died (held until its session expires)."""
    status, body = admin(http, "GET", topic_path(topic) + "/compaction")
    assert status == 200, (status, body)
    if body["status"] == "ERROR" and lease_conflicts and "is being compacted by" in body["lastError"]:
        return "ERROR"
    assert body["status"] != "ERROR", body
    return body["status"]


def compact(http: str, topic: str, timeout: float | None = None) -> None:
    """Compact ``topic`` and wait for its success (again while a dead compactor's lease holds)."""

    def done():
        status = compaction_status(http, topic, lease_conflicts=True)
        if status == "ERROR":
            trigger(http, topic)
        return status == "SUCCESS"

    trigger(http, topic)
    wait_until(done, f"the compaction of {topic}", timeout, interval=0.1)


# -- Pulsar ----------------------------------------------------------------------------------
def produce_pulsar(client, topic: str, updates_: list, ids: list | None = None, *, first: int = 0) -> list:
    """Send ``updates_`` batched; ``ids[first + i]`` gets each one's MessageId (as str)."""
    ids = ids if ids is not None else [None] * (first + len(updates_))
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=100,
                                      batching_max_publish_delay_ms=5, block_if_queue_full=True)
    errors = []

    def done(i):
        def callback(result, msg_id):
            if str(result).endswith("Ok"):
                ids[i] = str(msg_id)
            else:
                errors.append(result)
        return callback

    for i, (key, value) in enumerate(updates_):
        producer.send_async(value or b"", done(first + i), partition_key=key.decode())
    producer.flush()
    producer.close()
    assert not errors, errors[:3]
    return ids


def read_pulsar(client, pulsar, topic: str, *, compacted: bool) -> list[tuple]:
    """(MessageId str, key, value or None) of everything a reader from the earliest id gets."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted,
                                  receiver_queue_size=5000)
    out = []
    try:
        while reader.has_message_available():
            m = reader.read_next(timeout_millis=int(DEADLINE * 1000))
            out.append((str(m.message_id()), m.partition_key().encode(), m.data() or None))
    finally:
        reader.close()
    return out


# -- Kafka -----------------------------------------------------------------------------------
def create_compacted_topic(bootstrap: str, topic: str, **configs: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin_client = AdminClient({"bootstrap.servers": bootstrap})
    config = {"cleanup.policy": "compact", **configs}
    admin_client.create_topics([NewTopic(topic, 1, config=config)])[topic].result(15)


def produce_kafka(bootstrap: str, topic: str, updates_: list, offsets: list | None = None, *,
                  first: int = 0) -> list:
    """Produce ``updates_``; ``offsets[first + i]`` gets each one's offset."""
    import confluent_kafka

    offsets = offsets if offsets is not None else [None] * (first + len(updates_))
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.num.messages": 1000,
                                         "enable.idempotence": True})
    errors = []

    def done(i):
        def callback(err, msg):
            if err is not None:
                errors.append(err)
            else:
                offsets[i] = msg.offset()
        return callback

    for i, (key, value) in enumerate(updates_):
        while True:
            try:
                producer.produce(topic, value, key, on_delivery=done(first + i))
                break
            except BufferError:
                producer.poll(0.1)
    assert producer.flush(DEADLINE) == 0
    assert not errors, errors[:3]
    return offsets


def read_kafka(bootstrap: str, topic: str) -> list[tuple]:
    """(offset, key, value) of everything a consumer from offset 0 gets, up to the end of the partition."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": f"model-{time.monotonic_ns()}",
                                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + DEADLINE
    try:
        while True:
            assert time.monotonic() < deadline, f"no end of partition after {len(out)} records"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(msg.error())
            out.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()


# -- metadata and objects --------------------------------------------------------------------
async def _objects_state(metadata: str) -> dict:
    meta = connect(metadata)
    try:
        pending = [r.key async for r in meta.range_scan(records.GC_PENDING_ROOT + "/",
                                                         records.GC_PENDING_ROOT + "/\U0010ffff")]
        free = [records.object_from_marker(r.key) async for r in meta.range_scan(
            records.GC_FREE_ROOT + "/", records.GC_FREE_ROOT + "/\U0010ffff")]
        views = set()
        lo, hi = records.names_range()
        async for rec in meta.range_scan(lo, hi):
            st = await key_view.state(meta, records.decode(rec.value)["id"])
            if st.object:
                views.add(st.object)
        live = set()
        async for rec in meta.range_scan(records.OBJECTS_ROOT + "/", records.OBJECTS_ROOT + "/\U0010ffff"):
            value = records.decode(rec.value)
            if value.get("state") == "sealed" and value.get("live"):
                live.add(records.object_from_marker(rec.key))
        return {"pending": pending, "free": free, "views": views, "live": live}
    finally:
        await meta.close()


def stored_objects(objects_dir: Path) -> set[str]:
    return {str(p.relative_to(objects_dir)) for p in objects_dir.rglob("*") if p.is_file()}


def orphans(metadata: str, objects_dir: Path) -> dict | None:
    """None once GC settled with no orphan: no unresolved writes, nothing freed left, every
    stored object referenced, and the key-view objects exactly the views in force."""
    state = asyncio.run(_objects_state(metadata))
    stored = stored_objects(objects_dir)
    stored_views = {o for o in stored if o.startswith("keyview/")}
    unreferenced = stored - state["live"]
    problems = {name: value for name, value in (
        ("pending markers", state["pending"]), ("free objects", state["free"]),
        ("unreferenced objects", sorted(unreferenced)),
        ("view objects not in force", sorted(stored_views - state["views"])),
        ("views in force not stored", sorted(state["views"] - stored_views))) if value}
    return problems or None


def wait_settled(metadata: str, objects_dir: Path, timeout: float | None = None) -> None:
    last = {}

    def settled():
        last["problems"] = orphans(metadata, objects_dir)
        return last["problems"] is None

    try:
        wait_until(settled, "GC to settle", timeout, interval=0.2)
    except AssertionError:
        raise AssertionError(f"GC left: {last['problems']}") from None


class Background(threading.Thread):
    """Runs ``fn`` in a thread; ``result()`` re-raises its exception."""

    def __init__(self, fn) -> None:
        super().__init__(daemon=True)
        self.fn, self.error, self.value = fn, None, None

    def run(self) -> None:
        try:
            self.value = self.fn()
        except BaseException as exc:  # reported by result()
            self.error = exc

    def result(self, timeout: float | None = None):
        self.join(DEADLINE if timeout is None else timeout)
        assert not self.is_alive(), "the background task did not finish"
        if self.error is not None:
            raise self.error
        return self.value
