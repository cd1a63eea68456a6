"""Differential tests: the official pulsar-client (C++ core) against our codec.

The client talks to FakeBroker (conftest.py), which only understands what
nereus.codec.pulsar decodes and only says what it encodes. If a field
number, the frame layout, the checksum or a compression format were wrong,
the client would not get past the handshake or would reject our frames.
"""

from __future__ import annotations

import asyncio

import pytest

from nereus.codec.pulsar import (
    BatchBuilder,
    compress,
    decompress,
    encode_payload_command,
    iter_batch,
    pb,
    wrap,
)

TOPIC = "persistent://public/default/nereus-codec"

# pulsar-client's CompressionType name -> our wire value
CODECS = {"LZ4": pb.LZ4, "ZLib": pb.ZLIB, "ZSTD": pb.ZSTD, "SNAPPY": pb.SNAPPY}


async def test_handshake_producer_and_send(fake_broker, pulsar_client_factory):
    def scenario():
        client = pulsar_client_factory(fake_broker.url)
        try:
            producer = client.create_producer(TOPIC, batching_enabled=False)
            msg_id = producer.send(
                b"\x00payload\xff", properties={"k1": "v1", "k2": "v2"}, partition_key="pk-1", event_timestamp=1234
            )
            producer.close()
            return msg_id
        finally:
            client.close()

    msg_id = await asyncio.to_thread(scenario)

    # The client understood our SEND_RECEIPT (ledger 7, entry = sequence id 0).
    assert (msg_id.ledger_id(), msg_id.entry_id()) == (7, 0)

    connect = fake_broker.of_type("CONNECT")[0].body
    assert connect.client_version.startswith("Pulsar-CPP")
    assert connect.protocol_version >= 6  # checksums are on from v6
    assert connect.HasField("feature_flags")

    names = [f.command.type for f in fake_broker.frames]
    # After our CONNECTED the client went on with its next commands.
    order = [pb.BaseCommand.Type.Name(t) for t in names]
    assert order[0] == "CONNECT"
    assert order.index("PARTITIONED_METADATA") < order.index("LOOKUP") < order.index("PRODUCER")
    assert order.index("PRODUCER") < order.index("SEND") < order.index("CLOSE_PRODUCER")

    assert fake_broker.of_type("PONG"), "the client answers our PING"

    producer = fake_broker.of_type("PRODUCER")[0].body
    assert producer.topic == TOPIC

    send = fake_broker.of_type("SEND")[0]
    assert send.checksum is not None and send.checksum_ok
    assert send.body.sequence_id == 0 and send.body.num_messages == 1
    meta = send.metadata
    assert meta.producer_name == "nereus-prod"  # the name our PRODUCER_SUCCESS gave
    assert {kv.key: kv.value for kv in meta.properties} == {"k1": "v1", "k2": "v2"}
    assert meta.partition_key == "pk-1"
    assert meta.event_time == 1234
    assert not meta.HasField("num_messages_in_batch")
    assert bytes(send.payload) == b"\x00payload\xff"
    # The entry view starts at the crc32c magic, ready to store verbatim.
    assert bytes(send.entry[:2]) == b"\x0e\x01"


@pytest.mark.parametrize("codec", list(CODECS))
async def test_batched_compressed_send(fake_broker, pulsar_client_factory, pulsar_lib, codec):
    client_codec, wire_codec = getattr(pulsar_lib.CompressionType, codec), CODECS[codec]
    bodies = [b"message-%d-" % i + b"x" * (i * 37) for i in range(5)]

    def scenario():
        client = pulsar_client_factory(fake_broker.url)
        try:
            producer = client.create_producer(
                TOPIC,
                batching_enabled=True,
                batching_max_messages=len(bodies),
                batching_max_publish_delay_ms=1000,
                compression_type=client_codec,
            )
            for i, body in enumerate(bodies):
                producer.send_async(body, None, properties={"i": str(i)}, partition_key=f"key-{i}")
            producer.flush()
            producer.close()
        finally:
            client.close()

    await asyncio.to_thread(scenario)

    sends = fake_broker.of_type("SEND")
    assert sends and all(f.checksum_ok for f in sends)
    seen = []
    for frame in sends:
        meta = frame.metadata
        assert meta.compression == wire_codec
        assert meta.num_messages_in_batch == frame.body.num_messages
        raw = decompress(meta.compression, frame.payload, meta.uncompressed_size)
        for message in iter_batch(raw, meta.num_messages_in_batch):
            props = {kv.key: kv.value for kv in message.metadata.properties}
            seen.append((bytes(message.payload), props["i"], message.metadata.partition_key))
    assert seen == [(b, str(i), f"key-{i}") for i, b in enumerate(bodies)]


def _message(consumer_id: int, entry_id: int) -> pb.BaseCommand:
    return wrap(pb.CommandMessage(consumer_id=consumer_id, message_id=pb.MessageIdData(ledgerId=11, entryId=entry_id)))


def _metadata(seq: int, **kw) -> pb.MessageMetadata:
    return pb.MessageMetadata(producer_name="nereus", sequence_id=seq, publish_time=1_700_000_000_000 + seq, **kw)


@pytest.mark.parametrize("codec", list(CODECS))
async def test_consumer_accepts_our_message_frames(fake_broker, pulsar_client_factory, pulsar_lib, codec):
    wire_codec = CODECS[codec]

    def push(writer, consumer_id):
        # 1. A frame with a broken checksum: the client must drop it.
        corrupt = encode_payload_command(_message(consumer_id, 1), _metadata(1), b"corrupted")
        tail = bytearray(corrupt[-1])
        tail[-1] ^= 0xFF
        writer.writelines([*corrupt[:-1], bytes(tail)])
        # 2. A plain message with properties and a key.
        meta = _metadata(2, partition_key="key-2")
        meta.properties.add(key="origin", value="nereus")
        writer.writelines(encode_payload_command(_message(consumer_id, 2), meta, b"single"))
        # 3. A batch of three built by BatchBuilder, compressed by us.
        builder = BatchBuilder()
        for i in range(3):
            builder.add(b"batched-%d" % i, pb.SingleMessageMetadata(partition_key=f"b{i}"))
        raw = builder.to_bytes()
        meta = _metadata(3, compression=wire_codec, uncompressed_size=len(raw), num_messages_in_batch=3)
        writer.writelines(encode_payload_command(_message(consumer_id, 3), meta, compress(wire_codec, raw)))
        # 4. A message behind a BrokerEntryMetadata prefix (the client
        #    advertised supports_broker_entry_metadata on CONNECT).
        writer.writelines(
            encode_payload_command(
                _message(consumer_id, 4),
                _metadata(4),
                [b"with-", b"entry-metadata"],
                broker_entry_metadata=pb.BrokerEntryMetadata(broker_timestamp=99, index=42),
            )
        )

    fake_broker.on_flow = push

    def scenario():
        client = pulsar_client_factory(fake_broker.url)
        try:
            consumer = client.subscribe(TOPIC, "sub", initial_position=pulsar_lib.InitialPosition.Earliest)
            got = []
            for _ in range(5):
                msg = consumer.receive(timeout_millis=5000)
                mid = msg.message_id()
                got.append((msg.data(), msg.partition_key(), msg.properties(), mid.entry_id(), mid.batch_index()))
                consumer.acknowledge(msg)
            consumer.close()
            return got
        finally:
            client.close()

    got = await asyncio.to_thread(scenario)
    assert got == [
        (b"single", "key-2", {"origin": "nereus"}, 2, -1),
        (b"batched-0", "b0", {}, 3, 0),
        (b"batched-1", "b1", {}, 3, 1),
        (b"batched-2", "b2", {}, 3, 2),
        (b"with-entry-metadata", "", {}, 4, -1),
    ]

    subscribe = fake_broker.of_type("SUBSCRIBE")[0].body
    assert (subscribe.topic, subscribe.subscription) == (TOPIC, "sub")
    assert subscribe.initialPosition == pb.CommandSubscribe.Earliest
    assert fake_broker.of_type("FLOW")[0].body.messagePermits > 0

    # The corrupted frame came back as a validation-error ack for entry 1.
    rejected = [a for a in fake_broker.acks if a.HasField("validation_error")]
    assert [(a.validation_error, a.message_id[0].entryId) for a in rejected] == [(pb.CommandAck.ChecksumMismatch, 1)]
    acked = {m.entryId for a in fake_broker.acks if not a.HasField("validation_error") for m in a.message_id}
    assert {2, 4} <= acked
