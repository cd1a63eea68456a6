"""The compaction worker's deaths: one killed is restarted (the reason logged), and a broker killed with
SIGKILL takes its worker, the worker's Spark JVM and Spark's Python workers with it.

A module of its own (its own standalone): these tests run beside the schedule's other tests.
"""

from __future__ import annotations

import pytest

pulsar = pytest.importorskip("pulsar")
psutil = pytest.importorskip("psutil")
pytest.importorskip("pyiceberg")

from .schedule_node import covers, run_scheduled_node, wait_for, workers  # noqa: E402


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    yield from run_scheduled_node(tmp_path_factory)


def test_a_dead_worker_is_restarted_and_the_reason_logged(node):
    topic = "persistent://public/default/scheduled-restart"
    client = pulsar.Client(node.url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"before")
        first = wait_for(lambda: workers(node), "a worker runs", node, tick=lambda: producer.send(b"tick"))
        log_size = node.log.stat().st_size  # before the kill: the broker may log the exit at once
        first[0].kill()
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


def test_a_killed_broker_takes_its_worker_and_spark_with_it(node):
    """kill -9 of the broker while its worker runs: the worker, its JVM and Spark's Python workers exit on
    their own (each watches a pipe from its parent)."""
    topic = "persistent://public/default/scheduled-kill-9"
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
