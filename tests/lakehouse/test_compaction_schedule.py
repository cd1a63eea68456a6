"""The broker's compaction schedule, end to end: a standalone with a short schedule
compacts on its own, the topics' built-in Iceberg tables show the records (plain,
partitioned and Kafka auto-created topics), a Ctrl-C ends the broker and its worker
cleanly, the worker's Spark output stays in its own log file while the broker logs
one line per event, and a second worker waits for the first. The worker's deaths are
in ``test_compaction_worker_deaths.py``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

pulsar = pytest.importorskip("pulsar")
confluent_kafka = pytest.importorskip("confluent_kafka")
psutil = pytest.importorskip("psutil")
pytest.importorskip("pyiceberg")

from nereus.broker.compaction_schedule import HEALTHY_SECONDS, MAX_RESTART_DELAY, RestartDelay, last_error  # noqa: E402
from tests.standalone_process import admin as _admin  # noqa: E402

from .schedule_node import covers, run_scheduled_node, table_values, wait_for, workers  # noqa: E402


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    yield from run_scheduled_node(tmp_path_factory)

def test_restart_delays_double_up_to_a_limit_and_start_over_after_a_healthy_run():
    delay = RestartDelay(2)
    delays = [delay.after_exit(1) for _ in range(10)]
    assert delays[:4] == [2, 4, 8, 16] and delays[-1] == MAX_RESTART_DELAY
    assert delay.after_exit(HEALTHY_SECONDS) == 2
    assert RestartDelay(0).after_exit(0) == 1  # an interval of 0 must not restart in a busy loop


def test_the_reason_a_worker_died_is_its_last_error_line():
    traceback = ("12:00:01 INFO nereus: compacting\nTraceback (most recent call last):\n  File \"x.py\", line 1\n"
                 "    base = name.base()\nTypeError: 'TopicName' object is not callable\n"
                 "26/11/23 12:00:02 INFO ShutdownHookManager: Shutdown hook called\n")
    assert last_error(traceback) == "TypeError: 'TopicName' object is not callable"
    assert last_error("Error: cannot reach oxia://127.0.0.1:1\n") == "Error: cannot reach oxia://127.0.0.1:1"
    assert last_error("some output\n\n") == "some output"
    assert last_error("") is None


def test_the_broker_schedule_compacts_and_fills_the_sbt_table(node):
    topic = "persistent://public/default/scheduled"
    client = pulsar.Client(node.url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        expected = {b"m-%d" % i for i in range(60)}
        for value in sorted(expected):
            producer.send(value)
        wait_for(lambda: covers(node, topic, expected), "the table shows the records", node,
                 tick=lambda: producer.send(b"tick"))
    finally:
        client.close()


def test_partitioned_and_kafka_auto_created_topics_reach_their_tables(node):
    """Partitions are streams of their base topic's table (once, the worker died on them)."""
    topic = "persistent://public/default/scheduled-partitioned"
    kafka_topic = "scheduled-kafka"  # created by the Kafka producer's first metadata request
    _admin(node, "PUT", "/persistent/public/default/scheduled-partitioned/partitions", 3)
    client = pulsar.Client(node.url)
    kafka = confluent_kafka.Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 5})
    try:
        producer = client.create_producer(topic, batching_enabled=False,
                                          message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution)
        pulsar_values = {b"p-%d" % i for i in range(60)}
        for value in sorted(pulsar_values):
            producer.send(value)
        kafka_values = {b"k-%d" % i for i in range(200)}
        for value in sorted(kafka_values):
            kafka.produce(kafka_topic, value=value, key=value[-1:])
        assert kafka.flush(30) == 0

        def tick() -> None:
            producer.send(b"tick")
            kafka.produce(kafka_topic, value=b"tick")
            kafka.flush(30)

        wait_for(lambda: covers(node, topic, pulsar_values) and covers(node, kafka_topic, kafka_values),
                 "both tables show the records", node, tick=tick)
        assert {p for p, _, _ in table_values(node, topic)} == {0, 1, 2}
        assert {p for p, _, _ in table_values(node, kafka_topic)} == {0}
    finally:
        client.close()
    assert "compaction worker exited" not in node.log.read_text()


def test_a_topic_that_went_quiet_reaches_its_table(node):
    """No write after the last record: the stream's newest slices must still reach the
    offset index (storage groups them once the oldest is ``GROUP_MAX_AGE_MS`` old), then
    the schedule compacts them once they are ``--compaction-max-age`` old."""
    topic = "persistent://public/default/scheduled-quiet"
    kafka_topic = "scheduled-quiet-kafka"
    client = pulsar.Client(node.url)
    try:
        client.create_producer(topic, batching_enabled=False).send(b"only")
    finally:
        client.close()
    kafka = confluent_kafka.Producer({"bootstrap.servers": node.bootstrap, "linger.ms": 50})
    burst = {b"burst-%d" % i for i in range(2000)}
    for value in burst:
        kafka.produce(kafka_topic, value=value)
    assert kafka.flush(30) == 0
    wait_for(lambda: covers(node, topic, {b"only"}) and covers(node, kafka_topic, burst),
             "the quiet topics' tables show their records", node)  # no tick: nothing else is written


def test_ctrl_c_ends_the_broker_and_its_worker_cleanly(node):
    topic = "persistent://public/default/scheduled-ctrl-c"
    client = pulsar.Client(node.url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"one")
        wait_for(lambda: covers(node, topic, {b"one"}), "the worker compacts", node,
                 tick=lambda: producer.send(b"tick"))
    finally:
        client.close()
    (worker,) = workers(node)
    family = [worker] + worker.children(recursive=True)  # the worker, its Spark JVM and Python workers
    os.killpg(node.proc.pid, signal.SIGINT)  # what a terminal sends on Ctrl-C: the whole group
    assert node.proc.wait(timeout=120) == 0, node.log.read_text()[-4000:]
    gone, alive = psutil.wait_procs(family, timeout=60)
    assert not alive, alive
    log = node.log.read_text()
    assert "Traceback" not in log, log[-4000:]


#: What Spark, its JVM and py4j print; none of it belongs in the broker's output.
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")
SPARK_OUTPUT = ("log4j", "SparkContext", "WARN Utils", "NativeCodeLoader", "py4j", "jdk.incubator", "[Stage ")


def test_the_workers_output_is_in_its_own_log_and_the_broker_logs_events(node):
    """Runs after the Ctrl-C test: the broker's whole output, start to stop, is in ``node.log``."""
    assert not node.alive()
    broker_log = node.log.read_text()
    for spark_line in SPARK_OUTPUT:
        assert spark_line not in broker_log, spark_line
    assert "\r" not in broker_log and "Task was destroyed" not in broker_log
    foreign = [line for line in broker_log.splitlines() if line and not LOG_LINE.match(line)]
    assert not foreign, foreign[:20]  # only the broker's own log lines: no gRPC, JVM or Python warnings
    worker_log = node.data_dir / "logs" / "compaction.log"
    assert f"the worker's output goes to {worker_log.resolve()}" in broker_log
    text = worker_log.read_text()
    assert "Spark's default log4j profile" in text  # Spark's own lines: where they went instead
    assert "[Stage " not in text and "\r" not in text  # no console progress bars, also not there
    assert "Task was destroyed" not in text
    for event in ("nereus standalone ready", "pulsar listener on", "kafka listener on", "oxia protocol listening on",
                  "compaction worker started", "topic persistent://public/default/scheduled loaded",
                  "unloading: broker draining"):
        assert event in broker_log, event
    runs = [line for line in broker_log.splitlines() if "compaction: compacted" in line]
    assert runs and all(" INFO " in line for line in runs), runs
    assert "compaction: table public.default.scheduled: +" in broker_log


def test_a_second_worker_waits_for_the_first_to_exit(tmp_path):
    """The lock beside the worker's log: a worker started while an older one still runs (its broker was
    killed and restarted at once) begins only once the older one is gone."""
    lock = tmp_path / "logs" / "compaction.lock"
    hold = ("import sys\n"
            "from nereus.broker.data_lock import hold_lock_file\n"
            f"hold_lock_file({str(lock)!r}, on_wait=lambda holder: print('waiting for', holder, flush=True))\n"
            "print('held', flush=True)\n"
            "sys.stdin.read()\n")
    first = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    second = None
    try:
        assert first.stdout.readline().strip() == "held"
        second = subprocess.Popen([sys.executable, "-c", hold], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True)
        assert second.stdout.readline().strip() == f"waiting for {first.pid}"
        assert lock.read_text().strip() == str(first.pid)
        first.stdin.close()  # the first worker exits
        assert first.wait(timeout=30) == 0
        assert second.stdout.readline().strip() == "held"
        assert lock.read_text().strip() == str(second.pid)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
