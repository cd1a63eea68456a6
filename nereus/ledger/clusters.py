"""Remote clusters in the metadata plane: Pulsar's ``ClusterData``, one record per cluster.

``/nereus/pulsar/clusters/{name}`` holds what a replicator needs to reach that cluster,
under Pulsar's field names: ``serviceUrl``, ``serviceUrlTls`` (its admin REST API),
``brokerServiceUrl``, ``brokerServiceUrlTls`` (its Pulsar protocol), and how to
authenticate there: ``brokerClientAuthenticationPlugin`` /
``brokerClientAuthenticationParameters`` (a token: ``token:...`` or ``file:...``),
``brokerClientTlsEnabled``, ``brokerClientTrustCertsFilePath``,
``tlsAllowInsecureConnection``. The local cluster (``--cluster-name``) needs no record:
it is always known; a record of it, if written, only adds its URLs.

Which clusters a topic replicates to is a policy: the topic's ``replicationClusters``
(Pulsar's ``TopicPolicies``; a partitioned topic's applies to its partitions), else its
namespace's ``replication_clusters`` (Pulsar's ``Policies``). ``replication_clusters``
reads it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

from .naming import TopicName
from .policies import policies_key, topic_policies_key

CLUSTERS_ROOT = "/nereus/pulsar/clusters"

#: The ``ClusterData`` fields kept (others a client sends are ignored, as Pulsar ignores unknown ones).
FIELDS = ("serviceUrl", "serviceUrlTls", "brokerServiceUrl", "brokerServiceUrlTls",
          "brokerClientAuthenticationPlugin", "brokerClientAuthenticationParameters",
          "brokerClientTlsEnabled", "brokerClientTrustCertsFilePath", "tlsAllowInsecureConnection",
          "peerClusterNames")
#: The replication policy's field in a namespace's record (Pulsar's ``Policies``).
NAMESPACE_REPLICATION_FIELD = "replication_clusters"
#: The replication policy's field in a topic's record (Pulsar's ``TopicPolicies``).
TOPIC_REPLICATION_FIELD = "replicationClusters"


def cluster_key(name: str) -> str:
    return f"{CLUSTERS_ROOT}/{quote(name, safe='')}"


def name_of_key(key: str) -> str:
    return unquote(key[len(CLUSTERS_ROOT) + 1:])


@dataclass(frozen=True)
class ClusterData:
    """How to reach one cluster (Pulsar's ``ClusterData`` subset)."""

    name: str
    fields: dict = field(default_factory=dict)

    @property
    def broker_service_url(self) -> str | None:
        """The Pulsar URL a replicator connects to: TLS when the record asks for it."""
        if self.fields.get("brokerClientTlsEnabled") and self.fields.get("brokerServiceUrlTls"):
            return self.fields["brokerServiceUrlTls"]
        return self.fields.get("brokerServiceUrl") or self.fields.get("brokerServiceUrlTls")

    @property
    def service_url(self) -> str | None:
        """The admin REST URL (TLS when the record asks for it)."""
        if self.fields.get("brokerClientTlsEnabled") and self.fields.get("serviceUrlTls"):
            return self.fields["serviceUrlTls"]
        return self.fields.get("serviceUrl") or self.fields.get("serviceUrlTls")

    def auth_token(self) -> str | None:
        """The token the replicator presents, from Pulsar's token plugin parameters."""
        plugin = self.fields.get("brokerClientAuthenticationPlugin") or ""
        params = self.fields.get("brokerClientAuthenticationParameters") or ""
        if not params or ("Token" not in plugin and not params.startswith(("token:", "file:"))):
            return None
        if params.startswith("{"):  # Pulsar also takes {"token": "..."}
            try:
                params = json.loads(params).get("token", "")
            except ValueError:
                return None
        if params.startswith("token:"):
            return params[len("token:"):]
        if params.startswith("file:"):
            path = params[len("file:"):].removeprefix("//")
            with open(path, encoding="utf-8") as fh:
                return fh.read().strip()
        return params

    def encode(self) -> bytes:
        return json.dumps({k: v for k, v in self.fields.items() if k in FIELDS}).encode()

    @classmethod
    def decode(cls, name: str, value: bytes) -> "ClusterData":
        return cls(name, json.loads(value))


async def get_cluster(meta, name: str) -> ClusterData | None:
    rec = await meta.get(cluster_key(name))
    return None if rec is None else ClusterData.decode(name, rec.value)


async def list_clusters(meta) -> list[str]:
    """The names of the clusters with a record (the local one may have none)."""
    names = []
    async for rec in meta.range_scan(CLUSTERS_ROOT + "/", CLUSTERS_ROOT + "/\uffff"):
        names.append(name_of_key(rec.key))
    return sorted(names)


async def put_cluster(meta, data: ClusterData, *, expected_version_id: int | None = None):
    return await meta.put(cluster_key(data.name), data.encode(), expected_version_id=expected_version_id)


async def delete_cluster(meta, name: str) -> bool:
    """Forget a cluster's record; False if it had none."""
    return await meta.delete(cluster_key(name))


def _list_at(record: dict | None, field_name: str) -> list[str]:
    value = record.get(field_name) if isinstance(record, dict) else None
    return list(value) if isinstance(value, list) else []


def applied_replication_clusters(topic_policies: dict | None, namespace_policies: dict | None) -> list[str]:
    """The clusters a topic replicates to, from its policy records as stored: its own list
    when not empty, else its namespace's, else none. The local cluster is usually among them,
    and a name may no longer have a record."""
    return (_list_at(topic_policies, TOPIC_REPLICATION_FIELD)
            or _list_at(namespace_policies, NAMESPACE_REPLICATION_FIELD))


async def _record(meta, key: str) -> dict | None:
    rec = await meta.get(key)
    if rec is None:
        return None
    try:
        return json.loads(rec.value)
    except ValueError:
        return None


async def replication_clusters(meta, tenant: str, namespace: str, local_topic_name: str) -> list[str]:
    """``applied_replication_clusters`` of topic ``local_topic_name`` (a partition ``x-partition-N``
    reads ``x``'s policy), read from the metadata plane."""
    base = TopicName("persistent", tenant, namespace, local_topic_name).base.local
    return applied_replication_clusters(await _record(meta, topic_policies_key(tenant, namespace, base)),
                                        await _record(meta, policies_key(tenant, namespace)))


__all__ = ["CLUSTERS_ROOT", "FIELDS", "NAMESPACE_REPLICATION_FIELD", "TOPIC_REPLICATION_FIELD", "ClusterData",
           "applied_replication_clusters",
           "cluster_key", "delete_cluster", "get_cluster", "list_clusters", "name_of_key", "put_cluster",
           "replication_clusters"]
