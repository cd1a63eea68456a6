"""Client-side load for the cluster tests: producers that keep sending, and readers that check the result.

Every value a producer sends is unique (``{tag}-{seq}``), so reading a topic back
shows both losses (an acknowledged value missing) and duplicates (a value twice).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pulsar

PUBLIC = "persistent://public/default/"


def pulsar_client(url: str, log_dir: Path, name: str = "client") -> pulsar.Client:
    """A Pulsar client whose (chatty) native log goes to a file beside the brokers' logs."""
    return pulsar.Client(url, operation_timeout_seconds=60, connection_timeout_ms=5000,
                         logger=pulsar.FileLogger(pulsar.LoggerLevel.Info, str(log_dir / f"pulsar-{name}.log")))


def deadline_loop(timeout: float, what: str, condition: Callable[[], bool], interval: float = 0.1,
                  describe: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} {describe()}")
        time.sleep(interval)


class PulsarLoad:
    """One producer sending unique values continuously with ``send_async`` from a thread.

    The producer has a fixed name, so the broker's deduplication (on by default)
    drops the client's resends after a failover.
    """

    def __init__(self, client: pulsar.Client, topic: str, tag: str, *, pace: float = 0.004,
                 max_outstanding: int = 500) -> None:
        self.topic = topic
        self.tag = tag
        self.pace = pace
        self.producer = client.create_producer(
            topic, producer_name=f"load-{tag}", send_timeout_millis=0, block_if_queue_full=True,
            max_pending_messages=1000, batching_enabled=True, batching_max_publish_delay_ms=5)
        self.max_outstanding = max_outstanding
        self.lock = threading.Lock()
        self.acked: dict[bytes, pulsar.MessageId] = {}
        self.errors: list[str] = []
        self.sent = 0
        self.done = 0
        self.gate = threading.Event()
        self.gate.set()
        self.idle = threading.Event()  # set while gated and nothing outstanding
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"load-{tag}", daemon=True)

    def start(self) -> "PulsarLoad":
        self._thread.start()
        return self

    def value(self, seq: int) -> bytes:
        return f"{self.tag}-{seq:08d}".encode()

    def _callback(self, value: bytes):
        def done(result, msg_id) -> None:
            with self.lock:
                if result == pulsar.Result.Ok:
                    self.acked[value] = msg_id
                else:
                    self.errors.append(f"{value!r}: {result}")
                self.done += 1
        return done

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set():
            if not self.gate.is_set():
                self.gate.wait(0.1)
                continue
            if self.sent - self.done >= self.max_outstanding:
                time.sleep(0.01)  # a failover in progress: do not pile up more
                continue
            value = self.value(seq)
            try:
                self.producer.send_async(value, self._callback(value))
            except Exception as exc:  # the producer is closed or its queue broke
                with self.lock:
                    self.errors.append(f"{value!r}: send_async raised {exc!r}")
                return
            seq += 1
            with self.lock:
                self.sent += 1
            time.sleep(self.pace)

    @property
    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)

    def outstanding(self) -> int:
        with self.lock:
            return self.sent - self.done

    def wait_acked(self, count: int, timeout: float = 60.0) -> None:
        """Wait until at least ``count`` values are acknowledged."""
        deadline_loop(timeout, f"{self.tag}: {count} acked", lambda: self.acked_count >= count,
                      describe=lambda: f"(acked {self.acked_count}, sent {self.sent}, errors {self.errors[:3]})")

    def wait_progress(self, more: int, timeout: float = 60.0) -> None:
        self.wait_acked(self.acked_count + more, timeout)

    def pause(self, timeout: float = 90.0) -> None:
        """Stop sending and wait until everything sent is answered."""
        self.gate.clear()
        time.sleep(0.05)  # the sender thread passes its gate check at most once more
        self.producer.flush()
        deadline_loop(timeout, f"{self.tag}: all sends answered", lambda: self.outstanding() == 0,
                      describe=lambda: f"(outstanding {self.outstanding()})")

    def resume(self) -> None:
        self.gate.set()

    def stop(self, timeout: float = 120.0) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.producer.flush()
        deadline_loop(timeout, f"{self.tag}: all sends answered", lambda: self.outstanding() == 0,
                      describe=lambda: f"(outstanding {self.outstanding()})")
        self.producer.close()


def read_all(client: pulsar.Client, topic: str, timeout_ms: int = 30_000) -> list[bytes]:
    """Every message of ``topic`` from the earliest, in order (a non-durable reader)."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    values = []
    try:
        while reader.has_message_available():
            values.append(reader.read_next(timeout_millis=timeout_ms).data())
    finally:
        reader.close()
    return values


def assert_exactly_once(stored: list[bytes], acked, label: str = "") -> None:
    """Each acknowledged value is stored exactly once; nothing is stored twice."""
    counts = Counter(stored)
    duplicates = sorted(v for v, c in counts.items() if c > 1)
    missing = sorted(set(acked) - counts.keys())
    assert not missing, f"{label}: {len(missing)} acknowledged value(s) lost, e.g. {missing[:5]}"
    assert not duplicates, f"{label}: {len(duplicates)} value(s) stored twice, e.g. {duplicates[:5]}"


class PulsarSubscriber:
    """A durable subscription consuming with a message listener that acks each message."""

    def __init__(self, client: pulsar.Client, topic: str, subscription: str) -> None:
        self.lock = threading.Lock()
        self.received: Counter = Counter()
        self.consumer = client.subscribe(topic, subscription, initial_position=pulsar.InitialPosition.Earliest,
                                         message_listener=self._on_message)

    def _on_message(self, consumer, msg) -> None:
        with self.lock:
            self.received[msg.data()] += 1
        consumer.acknowledge(msg)

    def has_all(self, values) -> bool:
        with self.lock:
            return all(v in self.received for v in values)

    def pause(self) -> None:
        self.consumer.pause_message_listener()

    def resume(self) -> None:
        self.consumer.resume_message_listener()

    def close(self) -> None:
        self.consumer.close()
