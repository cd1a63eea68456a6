"""The replication clusters policy (a namespace's ``replication_clusters``, a topic's
``replicationClusters``), checked as Pulsar checks it, with its statuses and words."""

from __future__ import annotations

from .common import AdminError


def replication_clusters_of(value, *, tenant: str, allowed: list[str], known: set[str]) -> list[str]:
    """The sorted cluster names of ``value``: not empty and without ``global`` (412), each one
    ``known`` (403) and ``allowed`` for ``tenant`` (403)."""
    if value is None or value == []:
        raise AdminError(412, "ClusterIds should not be null or empty")
    if not isinstance(value, list) or not all(isinstance(c, str) and c for c in value):
        raise AdminError(400, "The replication clusters must be a JSON list of cluster names")
    clusters = sorted(set(value))
    if "global" in clusters:
        raise AdminError(412, "Cannot specify global in the list of replication clusters")
    for cluster in clusters:
        if cluster not in known:
            raise AdminError(403, f"Invalid cluster id: {cluster}")
    for cluster in clusters:
        if cluster not in allowed:
            raise AdminError(403, f"Cluster [{cluster}] is not in the list of allowed clusters list for "
                                  f"tenant [{tenant}]")
    return clusters


__all__ = ["replication_clusters_of"]
