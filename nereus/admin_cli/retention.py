"""Retention options shared by ``namespaces set-retention`` and ``topics set-retention``."""

from __future__ import annotations

import click

from . import args
from .output import table


def options(command):
    command = click.option("-t", "--time", "time_", required=True,
                           help="Retention time: 100m, 3h, 2d, 5w (seconds without a unit); -1: unlimited.")(command)
    return click.option("-s", "--size", required=True,
                        help="Retention size: 500M, 10G, 3T (bytes without a unit); -1: unlimited.")(command)


def body(size: str, time_: str) -> dict:
    """Pulsar's RetentionPolicies JSON."""
    return {"retentionTimeInMinutes": args.retention_minutes(time_), "retentionSizeInMB": args.size_mb(size)}


def view(value) -> str:
    if not value:
        return "not set"
    minutes, mb = value.get("retentionTimeInMinutes"), value.get("retentionSizeInMB")
    return table([["time", "unlimited" if minutes == -1 else f"{minutes} min"],
                  ["size", "unlimited" if mb == -1 else f"{mb} MB"]], ["retention", "value"])
