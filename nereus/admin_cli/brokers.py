"""``nereus admin brokers``: list, healthcheck, get-runtime-config, list-dynamic-config."""

from __future__ import annotations

import click

from .args import _q
from .session import group, json_option, pass_session

brokers = group("brokers", "Brokers: list, healthcheck, configuration.", aliases={"health": "healthcheck"})


@brokers.command("list")
@click.argument("cluster", required=False)
@json_option
@pass_session
def list_brokers(s, cluster):
    """List the live brokers (of CLUSTER, else of the cluster the URL's broker is in)."""
    s.emit(s.client.get(f"/brokers/{_q(cluster)}" if cluster else "/brokers"))


@brokers.command("healthcheck")
@json_option
@pass_session
def healthcheck(s):
    """Check that the broker answers (prints ok)."""
    s.emit(s.client.get("/brokers/health"))


@brokers.command("get-runtime-config")
@json_option
@pass_session
def runtime_config(s):
    """Show the settings the broker runs with."""
    s.emit(s.client.get("/brokers/configuration/runtime"))


@brokers.command("list-dynamic-config")
@json_option
@pass_session
def dynamic_config(s):
    """List the settings that can be changed while the broker runs."""
    s.emit(s.client.get("/brokers/configuration"))
