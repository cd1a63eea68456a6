"""The broker's compaction schedule, end to end: a standalone with a short schedule
compacts on its own, the topics' built-in Iceberg tables show the records (plain,
partitioned and Kafka auto-created topics), a dead worker is restarted, a Ctrl-C
ends the broker and its worker cleanly, and the worker's Spark output stays in its
own log file while the broker logs one line per event.

The node runs in a session of its own so a test can send SIGINT to its whole process
group, as a terminal does on Ctrl-C.
"""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import time

import pytest

pulsar = pytest.importorskip("pulsar")
confluent_kafka = pytest.importorskip("confluent_kafka")
psutil = pytest.importorskip("psutil")
pytest.importorskip("pyiceberg")

from nereus.broker.compaction_schedule import HEALTHY_SECONDS, MAX_RESTART_DELAY, RestartDelay, last_error  # noqa: E402
from nereus.lakehouse import sbt  # noqa: E402
from tests import standalone_process  # noqa: E402
from tests.standalone_process import Standalone  # noqa: E402
from tests.standalone_process import admin as _admin  # noqa: E402

#: Bounds a hang only: a loaded 2-core machine needs tens of seconds to start Spark.
DEADLINE = 200.0


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    node = Standalone(tmp_path_factory.mktemp("schedule") / "data",
                      ["--compaction-interval", "2", "--compaction-max-age", "2", "--compaction-min-mb", "100",
                       "--log-level", "INFO"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(standalone_process.subprocess, "Popen",
                      functools.partial(subprocess.Popen, start_new_session=True))
        node.start()
    yield node
    node.stop()


def load_table(node: Standalone, topic: str):
    """The topic's SBT table, or None while the worker has not created it."""
    catalog_db = node.data_dir / "iceberg" / "catalog.db"
    if not catalog_db.exists():
        return None
    objects = (node.data_dir / "objects").resolve().as_uri()
    try:
        return sbt.open_catalog(f"sqlite:///{catalog_db}", objects + "/iceberg").load_table(sbt.identifier(topic))
    except Exception:  # noqa: BLE001 - no table (or no catalog schema) yet
        return None


def table_values(node: Standalone, topic: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every row of the topic's SBT table (none yet: [])."""
    table = load_table(node, topic)
    if table is None:
        return []
    rows = table.scan().to_arrow()
    return sorted(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(),
                      rows.column("value").to_pylist()))


def wait_for(condition, what: str, node: Standalone, tick=None):
    """Poll ``condition`` until it returns something true; ``tick`` runs between polls."""
    deadline = time.monotonic() + DEADLINE
    while True:
        result = condition()
        if result:
            return result
        assert node.alive(), f"the node died:\n{node.log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"{what}: not within {DEADLINE:.0f} s\n{node.log.read_text()[-4000:]}"
        if tick is not None:
            tick()  # steady traffic: a stream's newest slices reach the index with its next write
        time.sleep(0.5)


def covers(node: Standalone, topic: str, expected: set[bytes]) -> bool:
    """The table holds every expected value exactly once, at dense offsets per partition."""
    rows = table_values(node, topic)
    values = [v for _, _, v in rows]
    if not expected <= set(values):
        return False
    assert all(values.count(v) == 1 for v in expected), rows
    for partition in {p for p, _, _ in rows}:
        offsets = [o for p, o, _ in rows if p == partition]
        assert offsets == list(range(len(offsets))), (partition, offsets)
    return True


def workers(node: Standalone) -> list[psutil.Process]:
    """The node's compaction worker processes (children running ``nereus.cli ... compact``)."""
    try:
        children = psutil.Process(node.proc.pid).children()
    except psutil.NoSuchProcess:
        return []
    out = []
    for child in children:
        try:
            if "compact" in child.cmdline():
                out.append(child)
        except psutil.NoSuchProcess:
            pass
    return out


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


def test_a_dead_worker_is_restarted_and_the_reason_logged(node):
    topic = "persistent://public/default/scheduled-restart"
    client = pulsar.Client(node.url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"before")
        first = wait_for(lambda: workers(node), "a worker runs", node, tick=lambda: producer.send(b"tick"))
        first[0].kill()
        log_size = node.log.stat().st_size
        restarted = wait_for(lambda: [w for w in workers(node) if w.pid != first[0].pid], "a new worker runs", node)
        log = node.log.read_text()[log_size:]
        assert "compaction worker exited with signal 9" in log and "restarting in" in log, log
        expected = {b"after-%d" % i for i in range(20)}
        for value in sorted(expected):
            producer.send(value)
        wait_for(lambda: covers(node, topic, expected | {b"before"}), "the new worker compacts", node,
                 tick=lambda: producer.send(b"tick"))
        assert [w.pid for w in workers(node)] == [restarted[0].pid]
    finally:
        client.close()


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


def _all_compaction_processes() -> list[psutil.Process]:
    """Every ``nereus ... compact`` worker process of this machine."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "compact" in cmdline and "--lock-file" in cmdline:
            found.append(proc)
    return found


def test_a_killed_broker_takes_its_worker_and_spark_with_it_and_a_restart_runs_one_worker(node):
    """kill -9 of the broker while its worker runs: the worker, its JVM and Spark's Python workers exit on
    their own; the restarted broker runs exactly one worker on the data and compacts what was written."""
    lock = str((node.data_dir / "logs" / "compaction.lock").resolve())

    def mine() -> list[psutil.Process]:
        return [p for p in _all_compaction_processes() if lock in p.cmdline()]

    topic = "persistent://public/default/scheduled-kill-9"
    if not node.alive():  # the Ctrl-C test before this one ended it
        node.start()
    client = pulsar.Client(node.url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"before")
        wait_for(lambda: covers(node, topic, {b"before"}), "the worker compacts", node,
                 tick=lambda: producer.send(b"tick"))
        producer.send(b"pending")  # a run may be under way as the broker dies
    finally:
        client.close()
    (worker,) = workers(node)
    family = [worker] + worker.children(recursive=True)
    assert any("java" in p.name() for p in family), [p.name() for p in family]
    node.kill()
    gone, alive = psutil.wait_procs(family, timeout=90)
    assert not alive, [(p.pid, p.name()) for p in alive]
    node.start()
    try:
        wait_for(lambda: covers(node, topic, {b"before", b"pending"}), "the restarted broker's worker compacts",
                 node)
        assert len(mine()) == 1, [p.cmdline() for p in mine()]
    finally:
        assert node.stop() == 0
