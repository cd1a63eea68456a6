"""The replicated WAL profile on a real cluster: owners killed (-9), a replica's WAL lost,
every broker restarted with entries not yet uploaded (a zombie's late writes: test_zombie).

Every broker keeps a WAL replica; writes go to 3 of them and are acknowledged at 2.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from .clients import PUBLIC, PulsarLoad, assert_exactly_once, pulsar_client, read_all

REPLICATED = ["--wal-profile", "replicated", "--wal-ensemble", "3", "--wal-write-quorum", "3",
              "--wal-ack-quorum", "2", "--gc-interval", "1", "--gc-pending-timeout", "20"]


def _replicated_cluster(make_cluster, store: str = "file"):
    return make_cluster(["a", "b", "c"], store=store, wal=True, broker_args=REPLICATED)


def _load_then(cluster, topic: str, tag: str, act) -> None:
    """Produce under load, call ``act(owner)`` with the topic's owner, go on producing; then every
    acknowledged message is read back exactly once."""
    client = pulsar_client(cluster.service_url(), cluster.root, tag)
    try:
        load = PulsarLoad(client, topic, tag).start()
        load.wait_acked(300)
        owner = cluster.broker(cluster.owner(topic))
        before = load.acked_count
        act(owner)
        cluster.wait_for(lambda: (o := cluster.owner(topic)) not in (None, owner.name) and o, 60,
                         f"{topic} owned by a broker other than {owner.name}")
        load.wait_acked(before + 300, timeout=90)
        load.stop()
        assert not load.errors, load.errors[:5]
    finally:
        client.close()
    # Read through the brokers that answer (a SIGSTOPped one accepts connections and says nothing).
    reader = pulsar_client(cluster.service_url(*[b for b in cluster.running if not b.paused]), cluster.root,
                           f"{tag}-read")
    try:
        assert_exactly_once(read_all(reader, topic), load.acked, topic)
    finally:
        reader.close()


@pytest.mark.parametrize("store", ["file", "s3"])
def test_owner_killed_with_replicated_wal_loses_nothing_acknowledged(make_cluster, store):
    cluster = _replicated_cluster(make_cluster, store)
    _load_then(cluster, f"{PUBLIC}repl-kill-{store}", "rk", lambda owner: owner.kill())
    # Every broker's WAL took part: the writes went to three replicas.
    assert all(any(b.wal_dir.glob("*.wal")) for b in cluster.brokers_list)


def test_owner_killed_and_one_replica_wal_deleted_loses_nothing(make_cluster):
    cluster = _replicated_cluster(make_cluster)

    def kill_and_lose_a_replica(owner) -> None:
        owner.kill()
        other = next(b for b in cluster.brokers_list if b is not owner)
        other.kill()
        shutil.rmtree(other.wal_dir)  # its disk is gone: the third replica still has every entry
        other.launch()
        other.wait_ready()

    _load_then(cluster, f"{PUBLIC}repl-lost-disk", "rl", kill_and_lose_a_replica)


def test_whole_cluster_restarted_with_entries_not_uploaded_serves_them_all(tmp_path):
    """The object store refuses every write while messages are acknowledged; every broker is killed;
    restarted (the store back), every message is there: from the replicas first, from the store once
    the collector has fenced the dead writers' blocks and uploaded them."""
    from tests.delayed_s3 import DelayedS3

    from .harness import Cluster

    with DelayedS3(tmp_path / "s3", latency_scale=0) as s3:
        cluster = Cluster(tmp_path / "cluster", ["a", "b", "c"], store="s3", moto_endpoint=s3.endpoint, wal=True,
                          broker_args=REPLICATED)
        try:
            cluster.start()
            topic = f"{PUBLIC}repl-restart"
            client = pulsar_client(cluster.service_url(), cluster.root, "rr")
            try:
                client.create_producer(topic).send(b"loaded")  # the topic exists before the outage
                s3.outage(True)
                load = PulsarLoad(client, topic, "rr").start()
                load.wait_acked(500)
                load.stop()
                assert not load.errors, load.errors[:5]
            finally:
                client.close()
            for broker in cluster.brokers_list:
                broker.kill()
            s3.outage(False)
            for broker in cluster.brokers_list:
                broker.launch()
            for broker in cluster.brokers_list:
                broker.wait_ready()
            client = pulsar_client(cluster.service_url(), cluster.root, "rr-after")
            try:
                values = read_all(client, topic)
                assert values[0] == b"loaded"
                assert_exactly_once(values[1:], load.acked, topic)
            finally:
                client.close()
            # The collector recovers the killed writers' blocks into the object store: none is left.
            dead = [f"{b.name}-{pid}" for b in cluster.brokers_list for pid in b.pids[:-1]]
            cluster.wait_for(lambda: not [m for m in cluster.pending_markers().values()
                                          if any(f"-{node}~" in m.get("prefix", "") for node in dead)],
                             120, "every block of the killed writers resolved")
        finally:
            cluster.close()


def test_the_object_store_down_produce_goes_on_until_the_upload_limit_then_waits(tmp_path):
    """An S3 outage: acks keep coming from the WAL replicas up to --wal-max-unuploaded-mb, then
    producers wait; when the store is back, everything is uploaded and every message is read."""
    import pulsar

    from tests.delayed_s3 import DelayedS3

    from .harness import Cluster

    with DelayedS3(tmp_path / "s3", latency_scale=0) as s3:
        cluster = Cluster(tmp_path / "cluster", ["a", "b", "c"], store="s3", moto_endpoint=s3.endpoint, wal=True,
                          broker_args=[*REPLICATED, "--wal-max-unuploaded-mb", "1"])
        try:
            cluster.start()
            topic = f"{PUBLIC}repl-outage"
            client = pulsar_client(cluster.service_url(), cluster.root, "outage")
            producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0,
                                              max_pending_messages=5000, block_if_queue_full=True)
            producer.send(b"first")  # loaded and writing before the outage
            owner = cluster.broker(cluster.owner(topic))
            s3.outage(True)
            acked: list[bytes] = []
            values = [b"%06d" % i + b"x" * 1018 for i in range(2500)]  # 1 KiB each: 2.5 MB in all

            def sent(value):
                return lambda result, _id: result == pulsar.Result.Ok and acked.append(value)

            for value in values:
                producer.send_async(value, sent(value))
            # Acknowledged from the replicas while nothing reaches the store, then back-pressure.
            cluster.wait_for(lambda: owner_metric(owner, "nereus_storage_wal_appends_waiting") >= 1, 60,
                             "appends waiting for uploads")
            assert 0 < len(acked) < len(values)
            assert owner_metric(owner, "nereus_storage_wal_upload_lag_bytes") >= 1 << 20
            s3.outage(False)
            producer.flush()
            cluster.wait_for(lambda: len(acked) == len(values), 180, "every message acknowledged")
            producer.close()
            assert read_all(client, topic) == [b"first", *values]
            client.close()
            cluster.wait_for(lambda: owner_metric(owner, "nereus_storage_wal_upload_lag_bytes") == 0, 120,
                             "everything uploaded")
        finally:
            cluster.close()


def owner_metric(broker, name: str) -> float:
    import re
    import urllib.request

    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(float(v) for v in re.findall(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="mounting a small tmpfs needs root")
def test_a_replica_with_a_full_disk_is_left_out_and_nothing_is_lost(tmp_path):
    """One broker's WAL disk is full (a 1 MB tmpfs: no segment fits): its writes fail, new blocks go to
    the other two replicas (ack quorum 2), producers never see an error."""
    from .harness import Cluster

    cluster = Cluster(tmp_path / "cluster", ["a", "b", "c"], wal=True, broker_args=REPLICATED)
    full = cluster.brokers_list[2].wal_dir
    full.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(full)], check=True, timeout=30)
    try:
        cluster.start()
        topic = f"{PUBLIC}repl-full"
        client = pulsar_client(cluster.service_url(), cluster.root, "full")
        try:
            load = PulsarLoad(client, topic, "full").start()
            load.wait_acked(1000, timeout=120)
            load.stop()
            assert not load.errors, load.errors[:5]
        finally:
            client.close()
        reader = pulsar_client(cluster.service_url(), cluster.root, "full-read")
        try:
            assert_exactly_once(read_all(reader, topic), load.acked, topic)
        finally:
            reader.close()
        assert not any(full.glob("*.wal"))  # nothing ever fitted there
    finally:
        cluster.close()
        subprocess.run(["umount", "-l", str(full)], check=False, timeout=30)
