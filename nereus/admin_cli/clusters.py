"""``nereus admin clusters``: list, get."""

from __future__ import annotations

import click

from .args import _q
from .session import group, json_option, pass_session

clusters = group("clusters", "Clusters: list, get.")


@clusters.command("list")
@json_option
@pass_session
def list_clusters(s):
    """List the clusters (a standalone is the cluster ``standalone``)."""
    s.emit(s.client.get("/clusters"))


@clusters.command("get")
@click.argument("cluster")
@json_option
@pass_session
def get(s, cluster):
    """Show a cluster's service URLs."""
    s.emit(s.client.get(f"/clusters/{_q(cluster)}"))
