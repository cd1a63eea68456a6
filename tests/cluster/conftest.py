"""Fixtures of the cluster tests: real processes (``nereus oxia``, brokers, a moto S3 server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.moto_server import serve_for_session

from .harness import Cluster

_live: list[Cluster] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and _live:
        for cluster in _live:
            report.sections.append((f"cluster logs ({cluster.root.name})", cluster.logs(80)))


@pytest.fixture(scope="session")
def cluster_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve_for_session(tmp_path_factory.mktemp("cluster-moto") / "moto.log")


def started_cluster(root, zones: list[str], **options) -> Iterator[Cluster]:
    """A started cluster for a module-scoped fixture (``yield from``); its logs join a failure's report."""
    cluster = Cluster(root, zones, **options)
    _live.append(cluster)
    try:
        cluster.start()
        yield cluster
    finally:
        _live.remove(cluster)
        cluster.close()


@pytest.fixture
def make_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """``make_cluster(zones, store="file"|"s3", **options)``: a started cluster, closed after the test."""
    made: list[Cluster] = []

    def make(zones: list[str], store: str = "file", **options) -> Cluster:
        endpoint = request.getfixturevalue("cluster_moto") if store == "s3" else None
        cluster = Cluster(tmp_path_factory.mktemp(f"cluster-{store}"), zones, store=store, moto_endpoint=endpoint,
                          **options)
        made.append(cluster)
        _live.append(cluster)
        cluster.start()
        return cluster

    yield make
    for cluster in made:
        _live.remove(cluster)
        cluster.close()
