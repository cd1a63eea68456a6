"""A broker whose metadata service is gone still stops on SIGTERM: exit code 0, in bounded time."""

from __future__ import annotations

import signal
import subprocess

from tests.cluster.harness import tail


def test_sigterm_after_metadata_service_died(make_cluster):
    cluster = make_cluster(["a", "a"])
    cluster.oxia.kill()
    cluster.oxia.wait(timeout=30)
    # Stopped once they know it is gone (their reconnecting clients are what held the stop up).
    cluster.wait_for(lambda: all("notification stream broke" in b.log.read_text(errors="replace")
                                 for b in cluster.brokers_list), 60, "brokers notice the metadata service is gone")
    for broker in cluster.brokers_list:
        broker.proc.terminate()
    for broker in cluster.brokers_list:
        try:
            # The deadline only guards against a hang; the broker gives the handoff a few seconds.
            code = broker.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"broker {broker.name} ignored SIGTERM:\n{tail(broker.log)}") from None
        assert code == 0, tail(broker.log)
    logs = "".join(b.log.read_text(errors="replace") for b in cluster.brokers_list)
    assert "metadata service unreachable" in logs


def test_sigterm_while_metadata_service_hangs(make_cluster):
    """A metadata service that accepts nothing (frozen) rather than refusing: the handoff times out."""
    cluster = make_cluster(["a"])
    broker = cluster.brokers_list[0]
    cluster.oxia.send_signal(signal.SIGSTOP)
    try:
        broker.proc.terminate()
        try:
            code = broker.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"broker {broker.name} ignored SIGTERM:\n{tail(broker.log)}") from None
        assert code == 0, tail(broker.log)
        assert "handoff given up" in broker.log.read_text(errors="replace")
    finally:
        cluster.oxia.send_signal(signal.SIGCONT)
