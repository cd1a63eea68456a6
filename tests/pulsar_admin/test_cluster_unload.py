"""Unload in a cluster: asked at any broker, the owner releases the topic's ownership and its clients move on."""

from __future__ import annotations

import uuid

from click.testing import CliRunner

from nereus.broker.cluster.ownership import owner_key
from nereus.cli import main
from tests.cluster.clients import PUBLIC, pulsar_client, read_all
from tests.cluster.conftest import cluster_moto, make_cluster  # noqa: F401 (fixtures)


def _owner_version(cluster, topic: str) -> int | None:
    rec = cluster.call(cluster._meta.get(owner_key(topic)))
    return rec.version.version_id if rec is not None else None


def test_unload_releases_ownership_and_the_producer_keeps_sending(make_cluster):  # noqa: F811
    cluster = make_cluster(["a", "a"])
    topic = PUBLIC + f"unload-{uuid.uuid4().hex[:8]}"
    client = pulsar_client(cluster.service_url(), cluster.root, "unload")
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"before")
        owner = cluster.owner(topic)
        claimed = _owner_version(cluster, topic)
        assert owner is not None and claimed is not None
        other = next(b for b in cluster.brokers_list if b.name != owner)

        # Asked at the broker that does not own it: redirected to the owner, which lets it go.
        result = CliRunner().invoke(main, ["admin", "--url", other.http_url, "topics", "unload", topic],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        # The producer reconnects, looks the topic up again and a broker claims it anew (a new record).
        producer.send(b"after")
        cluster.wait_for(lambda: _owner_version(cluster, topic) not in (None, claimed), 30, "a new ownership record")
        producer.close()
        assert read_all(client, topic) == [b"before", b"after"]
    finally:
        client.close()
