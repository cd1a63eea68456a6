"""Corpora of well-formed inputs for the parser targets, built with the project's encoders,
and the per-input generators of the mutation engine (``bench/fuzz.py --engine mutate``)."""

from __future__ import annotations

import io
import json
import random
import struct

import crc32c
import pyarrow as pa
import pyarrow.parquet as pq

from nereus.codec.kafka.protocol import SUPPORTED
from nereus.codec.kafka.records import Record, build_batch
from nereus.codec.pulsar import encode_command, pb, wrap
from nereus.storage import compacted_format, wal_format
from tests.fuzz.targets import _KAFKA_SEEDS, _compacted, _kafka_frame, _send_frame

from fuzz_mutate import hostile_bytes, mutate


# -- Pulsar frames ---------------------------------------------------------------

def pulsar_corpus() -> list[bytes]:
    commands = [
        pb.CommandConnect(client_version="2.11", protocol_version=21, auth_method_name="token", auth_data=b"x"),
        pb.CommandFlow(consumer_id=1, messagePermits=1000),
        pb.CommandLookupTopic(request_id=1, topic="persistent://public/default/t", authoritative=True),
        pb.CommandPing(),
        pb.CommandProducer(topic="persistent://public/default/t", producer_id=1, request_id=2, producer_name="p"),
        pb.CommandSubscribe(topic="persistent://public/default/t", subscription="s", subType=pb.CommandSubscribe.Shared,
                            consumer_id=1, request_id=3),
        pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual,
                      message_id=[pb.MessageIdData(ledgerId=1, entryId=2, batch_index=0, ack_set=[3])]),
        pb.CommandSeek(consumer_id=1, request_id=4, message_publish_time=5),
        pb.CommandGetTopicsOfNamespace(request_id=5, namespace="public/default"),
        pb.CommandNewTxn(request_id=6, txn_ttl_seconds=60, tc_id=0),
    ]
    corpus = [encode_command(wrap(c)) for c in commands]
    for size in (3, 40, 700):
        payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
        for batched in (False, True):
            for compression in (0, 1, 2, 3, 4):
                for with_bem in (False, True):
                    corpus.append(_send_frame(payload, batched, compression, with_bem))
    return corpus


def pulsar_input(rng: random.Random, corpus: list[bytes]) -> tuple[bytes, list[int]]:
    """A stream of 1-4 frames, each intact or hostile, and the chunk sizes it arrives in."""
    stream = b"".join(hostile_bytes(rng, corpus) if rng.random() < 0.7 else rng.choice(corpus)
                      for _ in range(rng.randint(1, 4)))
    return stream, [rng.randint(1, 64) for _ in range(rng.randint(0, 8))]


# -- Kafka requests ---------------------------------------------------------------

def kafka_corpus() -> list[bytes]:
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
    from kio.static.primitive import Records, i8, i32, i64
    import datetime

    from kio.static.primitive import i16

    batches = [build_batch([Record(i, i, b"k%d" % i, b"v" * 30, [("h", b"x")]) for i in range(3)], codec=codec)
               for codec in (0, 1, 2, 3, 4)]
    produce = ProduceRequest(transactional_id=None, acks=i16(1), timeout=datetime.timedelta(seconds=1), topic_data=(
        TopicProduceData(name="t", partition_data=tuple(
            PartitionProduceData(index=i32(n), records=Records(bytes(b))) for n, b in enumerate(batches))),))
    fetch = FetchRequest(cluster_id=None, replica_id=i32(-1), max_wait=datetime.timedelta(milliseconds=100),
                         min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0),
                         session_epoch=i32(-1), topics=(FetchTopic(topic="t", partitions=(FetchPartition(
                             partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0),
                             last_fetched_epoch=i32(-1), log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),)),),
                         forgotten_topics_data=(), rack_id="")
    find = FindCoordinatorRequest(key_type=i8(0), coordinator_keys=("g",))
    return _KAFKA_SEEDS + [_kafka_frame(0, 9, produce), _kafka_frame(1, 12, fetch), _kafka_frame(10, 4, find)]


_API_VERSIONS = [(key, version) for key, (_name, low, high) in SUPPORTED.items() for version in range(low, high + 1)]


def kafka_input(rng: random.Random, corpus: list[bytes]) -> bytes:
    """A hostile request body; a quarter of them claim another API key and version than their body has."""
    frame = hostile_bytes(rng, corpus)
    if len(frame) >= 4 and rng.random() < 0.25:
        key, version = rng.choice(_API_VERSIONS)
        frame = struct.pack(">hh", key, version) + frame[4:]
    return frame


# -- WAL objects ------------------------------------------------------------------

def wal_corpus(rng: random.Random) -> list[bytes]:
    corpus = []
    for _ in range(24):
        slices = [(stream, [(rng.randint(1, 5), rng.randbytes(rng.randint(0, 40))) for _ in range(rng.randint(1, 4))])
                  for stream in range(rng.randint(1, 3))]
        corpus.append(b"".join(bytes(c) for c in wal_format.encode_object(slices).chunks))
    return corpus


def forged_wal_object(rng: random.Random) -> bytes:
    """An object whose directory checksum is right but whose slice ranges lie."""
    body = rng.randbytes(rng.randint(0, 96))
    end = wal_format.HEADER_SIZE + len(body)
    slices = []
    for _ in range(rng.randint(1, 3)):
        pos = rng.randint(0, end) if rng.random() < 0.5 else rng.randint(max(end - 40, 0), end)
        slices.append((rng.randint(0, 3), pos, rng.randint(0, max(end - pos, 0))))
    head = struct.pack(">4sHHII", wal_format.MAGIC, wal_format.FORMAT_VERSION, 0, len(slices), 0)
    directory = b"".join(struct.pack(">QQI", *s) for s in slices)
    return (head + body + directory
            + struct.pack(">II4s", len(slices), crc32c.crc32c(directory), wal_format.END_MAGIC))


def _lying(rng: random.Random, true: int) -> int:
    return true if rng.random() < 0.7 else rng.choice((0, 1, true - 1, true + 1, 0xFFFFFFFF)) & 0xFFFFFFFF


def forged_wal_slices(rng: random.Random) -> bytes:
    """An object whose checksums are all right but whose slice and entry headers lie."""
    chunks, layouts, position = [], [], wal_format.HEADER_SIZE
    for stream in range(rng.randint(1, 3)):
        entries = [(rng.randint(0, 5), rng.randbytes(rng.randint(0, 24))) for _ in range(rng.randint(0, 4))]
        body = b"".join(wal_format._ENTRY_HEADER.pack(_lying(rng, count), _lying(rng, len(entry))) + entry
                        for count, entry in entries)
        if rng.random() < 0.2:
            body = mutate(rng, body, [body])
        hint = rng.choice((0, 7, (1 << 64) - 1))
        crc = crc32c.crc32c(body, crc32c.crc32c(struct.pack(">Q", hint)))
        records = sum(count for count, _ in entries)
        header = wal_format._SLICE_HEADER.pack(stream, hint, _lying(rng, len(entries)), _lying(rng, records),
                                               _lying(rng, len(body)), crc)
        chunks.append(header + body)
        layouts.append((stream if rng.random() < 0.9 else stream + 1, position, len(header) + len(body)))
        position += len(header) + len(body)
    head = struct.pack(">4sHHII", wal_format.MAGIC, wal_format.FORMAT_VERSION, 0, len(layouts), 0)
    directory = b"".join(struct.pack(">QQI", *layout) for layout in layouts)
    return (head + b"".join(chunks) + directory
            + struct.pack(">II4s", len(layouts), crc32c.crc32c(directory), wal_format.END_MAGIC))


def wal_input(rng: random.Random, corpus: list[bytes]) -> bytes:
    roll = rng.random()
    if roll < 0.2:
        return forged_wal_object(rng)
    if roll < 0.4:
        return forged_wal_slices(rng)
    return hostile_bytes(rng, corpus)


# -- Compacted objects ------------------------------------------------------------

def compacted_corpus(rng: random.Random) -> list[bytes]:
    corpus = [_compacted([(1, b"a"), (2, b"bb")]), _compacted([(3, b"x" * 40)])]
    for _ in range(6):
        corpus.append(_compacted([(rng.randint(1, 4), rng.randbytes(rng.randint(0, 60)))
                                  for _ in range(rng.randint(1, 5))]))
    # Parquet writes are slow: lying files are built once, then used as they are and mutated.
    return corpus + [_forged_compacted(rng) for _ in range(300)]


def _forged_compacted(rng: random.Random) -> bytes:
    """A readable Parquet file whose footer or entry columns lie (wrong values, types, nulls)."""
    entries = [(rng.randint(0, 4), rng.randbytes(rng.randint(0, 30))) for _ in range(rng.randint(0, 4))]
    columns = compacted_format.entry_columns([entries])
    roll = rng.random()
    if roll < 0.25:
        columns[compacted_format.ENTRY_RECORDS_COLUMN] = pa.array([[rng.choice((None, -1, 1, 2**62))] * len(entries)],
                                                                  pa.list_(pa.int64()))
    elif roll < 0.4:
        columns[compacted_format.ENTRIES_COLUMN] = pa.array([[None] * len(entries)], pa.list_(pa.binary()))
    elif roll < 0.55:
        name = rng.choice(list(columns))
        columns[name] = rng.choice((pa.array([1], pa.int64()), pa.array(["x"]), pa.array([[1.5]]), pa.array([None])))
    footer = {"stream": 7, "first": 100, "records": sum(n for n, _ in entries), "entries": len(entries),
              "generation": 1}
    if rng.random() < 0.5:
        footer[rng.choice(list(footer))] = rng.choice((None, -1, 2**70, "1", 1.5, [], {}, True))
    if rng.random() < 0.1:
        del footer[rng.choice(list(footer))]
    meta = {compacted_format.META_KEY: json.dumps(footer).encode() if rng.random() < 0.9 else rng.randbytes(8)}
    sink = io.BytesIO()
    pq.write_table(pa.table(columns).replace_schema_metadata(meta), sink)
    return sink.getvalue()


def compacted_input(rng: random.Random, corpus: list[bytes]) -> bytes:
    # Edits near the footer (its metadata and schema) reach the checks the reader makes
    # itself; edits in the column pages reach parquet's decoders.
    seed = rng.choice(corpus)
    if rng.random() < 0.1:
        return seed
    if rng.random() < 0.5:
        cut = len(seed) - rng.randint(1, min(len(seed), 400))
        return seed[:cut] + mutate(rng, seed[cut:], corpus)
    return hostile_bytes(rng, corpus)
