"""Clusters of one standalone each, made known to each other as Pulsar's admin API does it.

West advertises a second listener, ``viaproxy``, bound on a port of its own behind a
``CuttingProxy``: east's record of west names the proxy, so everything east sends west
(lookups and replicated entries) passes through it, and a test can cut the link.

A cluster made with ``brokers=N`` is one ``nereus standalone --brokers N``: broker 0 (the
standalone process, which also runs the metadata engine) and N-1 child broker processes,
broker i on each of broker 0's ports + i. Other clusters' records of it list every
broker's Pulsar address, as a Pulsar service URL with several hosts does.
"""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from tests.cutting_proxy import CuttingProxy
from tests.ports import free_port
from tests.standalone_process import Standalone
from tests.waiting import wait_until

#: Seconds a multi-broker cluster's broker keeps its metadata session (and its topics) without
#: answering: short, so that a killed broker's topics move within a test's patience.
SESSION_TIMEOUT = 3


def admin(node: Standalone, method: str, path: str, body=None, *, token: str | None = None):
    """Call ``/admin/v2{path}`` on ``node`` (as the role of ``token``, if given); the decoded answer
    (None when empty). Errors raise HTTPError."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(f"{node.http}/admin/v2{path}", data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read()
    return json.loads(text) if text else None


def stats(node: Standalone, topic: str, *, token: str | None = None) -> dict:
    return admin(node, "GET", f"/persistent/{topic.split('://', 1)[-1]}/stats", token=token)


def stats_once_there(node: Standalone, topic: str) -> dict | None:
    """The topic's stats, None while the cluster has no such topic yet (its replicator has not created it)."""
    try:
        return stats(node, topic)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise


class Cluster:
    """One standalone named ``name``; ``proxy`` (when made with one) fronts a second Pulsar listener."""

    def __init__(self, name: str, root: Path, *, behind_proxy: bool = False, extra: list[str] | None = None,
                 brokers: int = 1):
        self.name = name
        self.brokers = brokers
        args = ["--compaction-interval", "0", "--cluster-name", name, *(extra or [])]
        if brokers > 1:
            args += ["--session-timeout", str(SESSION_TIMEOUT)]
        self.node = Standalone(root / name, args, brokers=brokers)
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
        if self.proxy:
            return f"pulsar://127.0.0.1:{self.proxy.port}"
        base = self.node.pulsar_port
        return "pulsar://" + ",".join(f"127.0.0.1:{base + i}" for i in range(self.brokers))

    def broker_http(self, index: int) -> str:
        return f"http://127.0.0.1:{self.node.http_port + index}"

    def broker_of(self, pulsar_url: str) -> int:
        """The index of the broker serving at ``pulsar_url`` (a lookup's ``brokerUrl``)."""
        return int(pulsar_url.rsplit(":", 1)[1]) - self.node.pulsar_port

    def registered(self) -> list[str]:
        """The brokers of this cluster that hold a metadata session, as its broker 0 sees them."""
        with urllib.request.urlopen(f"{self.node.http}/admin/v2/brokers/{self.name}", timeout=10) as response:
            return json.loads(response.read())

    def child(self, index: int) -> psutil.Process | None:
        """The running process of child broker ``index`` (>= 1), found by the Pulsar port it was given;
        None while it has none (killed, not restarted yet)."""
        port = str(self.node.pulsar_port + index)
        for process in psutil.Process(self.node.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                args = process.cmdline()
                if "--pulsar-port" in args and args[args.index("--pulsar-port") + 1] == port:
                    return process
        return None

    def wait_all_brokers(self) -> None:
        """Until every broker serves its admin API and all of them are registered."""
        def all_serving() -> bool:
            assert self.node.alive(), self.node.log.read_text()[-3000:]
            try:
                for index in range(self.brokers):
                    with urllib.request.urlopen(f"{self.broker_http(index)}/admin/v2/brokers/ready", timeout=10):
                        pass
                return len(self.registered()) == self.brokers
            except OSError:
                return False
        wait_until(all_serving, f"the {self.brokers} brokers of {self.name} serving", timeout=90)

    def start(self) -> None:
        self.node.start()
        if self.brokers > 1:
            self.wait_all_brokers()

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
