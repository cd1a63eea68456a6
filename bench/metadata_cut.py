"""Unavailability while a broker is cut off from the metadata service, and after the cut heals.

Three ``nereus broker`` processes over one ``nereus oxia``; the third runs under a group id
of its own and iptables cuts its traffic to the metadata port (``tests/cluster/network_cut.py``):
packets dropped silently, or connections reset, in turn. Two Pulsar producers on topics the
victim owns and an idempotent Kafka producer over six partitions keep sending. Per cut:

* ``back``: seconds from the cut until the victim's Pulsar topics and Kafka partitions are
  owned by the others and every one of their producers is acknowledged again from there. Target: session timeout + 5 s,
  for any cut length (``--cut-seconds``, default session timeout + 10 s: the cut outlasts it).
* ``healed``: seconds from the heal until the victim is registered again and owns topics again
  (the heal race of a rejoining broker), every producer acknowledged again.

At the end everything acknowledged is read back: lost or duplicated values are counted.
Needs root, iptables and setpriv. Usage:
    .venv/bin/python bench/metadata_cut.py [--rounds 6] [--session-timeout 10] [--cut-seconds 20]
The last line is ``key=value`` pairs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cluster.clients import PUBLIC, PulsarLoad, pulsar_client, read_all  # noqa: E402
from tests.cluster.harness import Cluster  # noqa: E402
from tests.cluster.network_cut import CUT_GID, KafkaLoad, MetadataCut, read_kafka, topics_owned_by  # noqa: E402


def _until(condition, timeout: float, what: str) -> float:
    """Seconds until ``condition()`` holds (polled every 50 ms); fails after ``timeout``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise SystemExit(f"not within {timeout} s: {what}")
        time.sleep(0.05)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--session-timeout", type=float, default=10.0)
    parser.add_argument("--cut-seconds", type=float, default=None)
    args = parser.parse_args()
    cut_seconds = args.cut_seconds if args.cut_seconds is not None else args.session_timeout + 10
    from confluent_kafka.admin import AdminClient, NewTopic

    root = Path(tempfile.mkdtemp(prefix="metadata-cut-"))
    cluster = Cluster(root, ["a", "a", "a"], session_timeout=args.session_timeout)
    cluster.start()
    network = MetadataCut(cluster.oxia_port)
    backs, heals, modes = [], [], []
    try:
        victim = cluster.brokers_list[2]
        victim.group = CUT_GID
        cluster.restart(victim)
        cluster.wait_ring_settled()
        client = pulsar_client(cluster.service_url(), root, "bench")
        topics = topics_owned_by(cluster, victim.name, client, 2)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
        admin.create_topics([NewTopic("kcut", 6, 1)])["kcut"].result(timeout=60)
        loads = [PulsarLoad(client, topic, f"p{i}").start() for i, topic in enumerate(topics)]
        kafka = KafkaLoad(cluster.bootstrap(), "kcut", 6).start()
        for load in loads:
            load.wait_acked(100)
        for round_ in range(args.rounds):
            mode = ("drop", "reset")[round_ % 2]
            led = [p for p in range(6) if cluster.owner(f"{PUBLIC}kcut-partition-{p}") == victim.name]
            network.cut(mode)
            cut_at = time.monotonic()
            streams = topics + [f"{PUBLIC}kcut-partition-{p}" for p in led]
            _until(lambda: all(cluster.owner(s) not in (None, victim.name) for s in streams), 180,
                   f"{mode}: the victim's topics owned by the others")
            pulsar_at = {load.tag: load.acked_count for load in loads}  # acks from here on are the others'
            kafka_at = {p: kafka.acked_on(p) for p in range(6)}
            _until(lambda: all(load.acked_count > pulsar_at[load.tag] + 10 for load in loads)
                   and all(kafka.acked_on(p) > kafka_at[p] + 10 for p in led), 180, f"{mode}: served again")
            back = time.monotonic() - cut_at
            time.sleep(max(0.0, cut_seconds - back))  # the cut lasts its length whatever happened meanwhile
            network.heal()
            pulsar_at = {load.tag: load.acked_count for load in loads}
            healed = _until(lambda: cluster.brokers().get(victim.name, {}).get("state") == "active"
                            and victim.name in set(cluster.owners().values())
                            and all(load.acked_count > pulsar_at[load.tag] + 10 for load in loads), 300,
                            f"{mode}: converged after the heal")
            backs.append(back)
            heals.append(healed)
            modes.append(mode)
            print(f"round {round_ + 1} ({mode}, cut {cut_seconds:g} s): served again after {back:.1f} s; "
                  f"after the heal, the victim owns topics again in {healed:.1f} s", flush=True)
        lost = duplicated = 0
        for load in loads:
            load.stop()
            counts = Counter(read_all(client, load.topic))
            lost += len(set(load.acked) - counts.keys())
            duplicated += sum(1 for c in counts.values() if c > 1)
        kafka.stop()
        stored = read_kafka(cluster.bootstrap(), "kcut", 6, sum(len(v) for v in kafka.acked.values()))
        for p in range(6):
            counts = Counter(stored[p])
            lost += len(set(kafka.acked[p]) - counts.keys())
            duplicated += sum(1 for c in counts.values() if c > 1)
        client.close()
    finally:
        if network.active:
            network.heal()
        cluster.close()
    print(f"rounds={len(backs)} session_timeout={args.session_timeout:g} cut_seconds={cut_seconds:g} "
          f"back_median={statistics.median(backs):.1f} back_max={max(backs):.1f} "
          f"healed_median={statistics.median(heals):.1f} healed_max={max(heals):.1f} "
          f"target={args.session_timeout + 5:g} lost={lost} duplicated={duplicated}")


if __name__ == "__main__":
    main()
