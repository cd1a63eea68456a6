"""``spark.readStream.format("nereus")`` against a real standalone: micro-batches, the
per-trigger cap, new partitions, and exactly-once output across a restart from a checkpoint."""

from __future__ import annotations


import pytest

pyspark = pytest.importorskip("pyspark")
pulsar = pytest.importorskip("pulsar")

from tests.standalone_process import Standalone  # noqa: E402
from tests.standalone_process import admin as _admin  # noqa: E402


@pytest.fixture(scope="module")
def client(standalone):
    c = pulsar.Client(standalone.url)
    yield c
    c.close()




def _stream(spark, node: Standalone, topic: str, **options: str):
    reader = (spark.readStream.format("nereus")
              .option("metadata", f"oxia://127.0.0.1:{node.ports['oxia']}")
              .option("objects", (node.data_dir / "objects").resolve().as_uri())
              .option("topic", topic))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _produce(client, topic: str, values: list[str], key: str | None = None) -> dict[int, bytes]:
    """offset -> value of messages sent one entry each (offset = entry id)."""
    producer = client.create_producer(topic, batching_enabled=False)
    try:
        kwargs = {"partition_key": key} if key else {}
        return {producer.send(v.encode(), **kwargs).entry_id(): v.encode() for v in values}
    finally:
        producer.close()


def _memory(df, name: str, **trigger):
    return (df.writeStream.format("memory").queryName(name)
            .trigger(**(trigger or {"processingTime": "100 milliseconds"})).start())


def _drop_last_commit(checkpoint) -> int:
    """Forget that the last micro-batch committed, as a crash after its output and before its commit would."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    crc = checkpoint / "commits" / f".{last}.crc"
    if crc.exists():
        crc.unlink()
    return last


def test_exactly_once_across_restart(spark, standalone, client, tmp_path):
    topic = "persistent://public/default/stream-once"
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    expected = _produce(client, topic, [f"a-{i}" for i in range(50)])

    def start():
        df = _stream(spark, standalone, topic, maxRecordsPerTrigger="30", recordsPerPartition="16")
        return (df.select("offset", "value").writeStream.format("parquet")
                .option("path", str(out)).option("checkpointLocation", str(checkpoint))
                .trigger(processingTime="100 milliseconds").start())

    query = start()
    try:
        query.processAllAvailable()
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert sizes == [30, 20]  # the cap split the backlog
        expected |= _produce(client, topic, [f"b-{i}" for i in range(30)])
        query.processAllAvailable()
    finally:
        query.stop()
    expected |= _produce(client, topic, [f"c-{i}" for i in range(40)])
    replayed = _drop_last_commit(checkpoint)

    query = start()
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert (checkpoint / "commits" / str(replayed)).exists()  # the restart ran that batch again

    got = [(r.offset, bytes(r.value)) for r in spark.read.parquet(str(out)).collect()]
    assert len(got) == len(expected) == 120  # every committed record once: no loss, no duplicate
    assert dict(got) == expected


def test_new_partitions_start_at_earliest(spark, standalone, client):
    topic = "persistent://public/default/stream-parts"
    _admin(standalone, "PUT", "/persistent/public/default/stream-parts/partitions", 2)
    producer = client.create_producer(topic, batching_enabled=False)
    sent = {}
    for i in range(30):
        mid = producer.send(f"p-{i}".encode(), partition_key=f"k{i}")
        sent[(mid.partition(), mid.entry_id())] = f"p-{i}".encode()
    producer.close()

    query = _memory(_stream(spark, standalone, topic), "stream_parts")
    try:
        query.processAllAvailable()
        _admin(standalone, "POST", "/persistent/public/default/stream-parts/partitions", 3)
        late = _produce(client, f"{topic}-partition-2", [f"late-{i}" for i in range(5)])
        sent |= {(2, offset): value for offset, value in late.items()}
        query.processAllAvailable()
    finally:
        query.stop()
    rows = spark.sql("SELECT partition, offset, value FROM stream_parts").collect()
    got = {(r.partition, r.offset): bytes(r.value) for r in rows}
    assert len(rows) == len(got) == 35
    assert got == sent
    assert sorted(o for p, o in got if p == 2) == [0, 1, 2, 3, 4]


def _reader(node: Standalone, topic: str, **options: str):
    """The stream reader Spark would make, driven directly: its offsets without a query."""
    from nereus.lakehouse.spark import SCHEMA
    from nereus.lakehouse.streaming import NereusStreamReader

    return NereusStreamReader({"metadata": f"oxia://127.0.0.1:{node.ports['oxia']}",
                               "objects": (node.data_dir / "objects").resolve().as_uri(), "topic": topic,
                               **options}, SCHEMA)


def test_offsets(standalone, client):
    topic = "persistent://public/default/stream-offsets"
    assert _reader(standalone, topic).initialOffset() == {}  # nothing written yet
    _produce(client, topic, [f"old-{i}" for i in range(10)])

    assert _reader(standalone, topic).initialOffset() == {"-1": 0}
    assert _reader(standalone, topic, startingOffset="latest").initialOffset() == {"-1": 10}
    assert _reader(standalone, topic, startingOffset='{"-1": 4}').initialOffset() == {"-1": 4}
    assert _reader(standalone, topic, startingOffset="99").initialOffset() == {"-1": 10}  # clamped to the tail

    capped = _reader(standalone, topic, startingOffset="2", maxRecordsPerTrigger="5")
    assert capped.latestOffset() == {"-1": 7}  # Spark may ask for the latest before the initial offset
    assert capped.initialOffset() == {"-1": 2}
    assert capped.latestOffset() == {"-1": 10}
    ranges = [p.range for p in capped.partitions({"-1": 2}, {"-1": 7})]
    assert [(r.start, r.end) for r in ranges] == [(2, 7)]
    restarted = _reader(standalone, topic, maxRecordsPerTrigger="3")
    restarted.partitions({"-1": 6}, {"-1": 6})  # what Spark does first on a restart from a checkpoint
    assert restarted.latestOffset() == {"-1": 9}


def test_cap_is_shared_by_backlog():
    from nereus.lakehouse.streaming import cap_offsets

    assert cap_offsets({"0": 0, "1": 0}, {"0": 10, "1": 30}, 100) == {"0": 10, "1": 30}
    assert cap_offsets({"0": 0, "1": 0}, {"0": 10, "1": 30}, 8) == {"0": 2, "1": 6}
    assert cap_offsets({"0": 5}, {"0": 6, "1": 9, "2": 9}, 2) == {"0": 6, "1": 1, "2": 0}  # rounding, in order


@pytest.mark.parametrize("option, value", [("maxRecordsPerTrigger", "0"), ("startingOffset", "soon"),
                                           ("startingOffset", '{"x": 1}'), ("recordsPerPartition", "-3")])
def test_bad_options_fail_at_load(spark, standalone, option, value):
    with pytest.raises(Exception, match=option):
        _stream(spark, standalone, "stream-offsets", **{option: value})


def test_ending_offset_is_refused(standalone):
    with pytest.raises(ValueError, match="endingOffset is for batch reads"):
        _reader(standalone, "stream-offsets", endingOffset="5")
