"""Clusters of one standalone each, made known to each other as Pulsar's admin API does it.

West advertises a second listener, ``viaproxy``, bound on a port of its own behind a
``CuttingProxy``: east's record of west names the proxy, so everything east sends west
(lookups and replicated entries) passes through it, and a test can cut the link.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from pathlib import Path

from tests.cutting_proxy import CuttingProxy
from tests.ports import free_port
from tests.standalone_process import Standalone


def admin(node: Standalone, method: str, path: str, body=None):
    """Call ``/admin/v2{path}`` on ``node``; the decoded answer (None when empty). Errors raise HTTPError."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{node.http}/admin/v2{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
    return json.loads(text) if text else None


def stats(node: Standalone, topic: str) -> dict:
    return admin(node, "GET", f"/persistent/{topic.split('://', 1)[-1]}/stats")


class Cluster:
    """One standalone named ``name``; ``proxy`` (when made with one) fronts a second Pulsar listener."""

    def __init__(self, name: str, root: Path, *, behind_proxy: bool = False, extra: list[str] | None = None):
        self.name = name
        args = ["--compaction-interval", "0", "--cluster-name", name, *(extra or [])]
        self.node = Standalone(root / name, args)
        self.proxy = None
        if behind_proxy:
            port = free_port()
            self.proxy = CuttingProxy("127.0.0.1", port)
            own = self.node.ports["pulsar"]
            args += ["--advertised-listeners",
                     f"internal:pulsar://127.0.0.1:{own},viaproxy:pulsar://127.0.0.1:{self.proxy.port}",
                     "--bind-addresses", f"viaproxy:pulsar://127.0.0.1:{port}"]
            self.node.extra_args = args

    @property
    def reached_at(self) -> str:
        """The Pulsar URL other clusters replicate to."""
        return f"pulsar://127.0.0.1:{self.proxy.port}" if self.proxy else self.node.url

    def start(self) -> None:
        self.node.start()

    def stop(self) -> None:
        self.node.stop()
        if self.proxy is not None:
            self.proxy.close()


def introduce(clusters: list[Cluster]) -> None:
    """Make every cluster known to every other one (``PUT /admin/v2/clusters/{name}``)."""
    for here in clusters:
        for there in clusters:
            if there is not here:
                admin(here.node, "PUT", f"/clusters/{there.name}",
                      {"serviceUrl": there.node.http, "brokerServiceUrl": there.reached_at})


def replicate_namespace(clusters: list[Cluster], namespace: str, names: list[str] | None = None) -> None:
    """Create ``namespace`` (and its tenant) on each cluster, replicated between ``names`` (default: all)."""
    tenant = namespace.split("/")[0]
    names = names or [c.name for c in clusters]
    for cluster in clusters:
        with contextlib.suppress(urllib.error.HTTPError):  # 409: made by an earlier call
            admin(cluster.node, "PUT", f"/tenants/{tenant}",
                  {"adminRoles": [], "allowedClusters": sorted(c.name for c in clusters)})
        with contextlib.suppress(urllib.error.HTTPError):
            admin(cluster.node, "PUT", f"/namespaces/{namespace}")
        admin(cluster.node, "POST", f"/namespaces/{namespace}/replication", names)


@contextlib.contextmanager
def clusters(root: Path, names: list[str], *, behind_proxy: tuple[str, ...] = ()):
    """Started clusters, introduced to each other; stopped after."""
    made = [Cluster(name, root, behind_proxy=name in behind_proxy) for name in names]
    try:
        for cluster in made:
            cluster.start()
        introduce(made)
        yield made
    finally:
        for cluster in made:
            cluster.stop()
