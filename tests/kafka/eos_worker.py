"""A consume-transform-produce loop with exactly-once semantics (confluent-kafka), run as its own process.

``python -m tests.kafka.eos_worker BOOTSTRAP IN_TOPIC OUT_TOPIC GROUP TRANSACTIONAL_ID``: reads IN_TOPIC from
the group's committed offsets, writes ``out-{value}`` to the same partition of OUT_TOPIC and commits the input
offsets in the same transaction, a few records per transaction; exits 0 once every input partition is
consumed to its end. Prints ``ready`` once its producer fenced any earlier instance.
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer, Producer, TopicPartition

PER_TRANSACTION = 5


def main(bootstrap: str, source: str, sink: str, group: str, tid: str) -> int:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 10000,
                         "linger.ms": 1})
    producer.init_transactions(60)  # fences an earlier instance and aborts its open transaction
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    partitions = consumer.list_topics(source, timeout=30).topics[source].partitions
    tps = [TopicPartition(source, p) for p in sorted(partitions)]
    committed = consumer.committed(tps, 60)
    positions = {tp.partition: max(tp.offset, 0) for tp in committed}
    consumer.assign([TopicPartition(source, p, offset) for p, offset in positions.items()])
    ends = {tp.partition: consumer.get_watermark_offsets(tp, 30)[1] for tp in tps}
    print("ready", flush=True)
    while any(positions[p] < end for p, end in ends.items()):
        messages = [m for m in consumer.consume(PER_TRANSACTION, 0.5) if not m.error()]
        if not messages:
            continue
        producer.begin_transaction()
        for msg in messages:
            producer.produce(sink, b"out-" + msg.value(), partition=msg.partition())
            positions[msg.partition()] = msg.offset() + 1
        producer.send_offsets_to_transaction([TopicPartition(source, p, o) for p, o in positions.items()],
                                             consumer.consumer_group_metadata(), 60)
        producer.commit_transaction(60)
    consumer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
