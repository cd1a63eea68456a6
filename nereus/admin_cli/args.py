"""Arguments as ``pulsar-admin`` takes them: topic and namespace names, sizes, times, message ids."""

from __future__ import annotations

import re
import time
from datetime import datetime
from urllib.parse import quote

import click

_SIZE = re.compile(r"^(\d+)([kKmMgGtT]?)$")
_TIME = re.compile(r"^(\d+)([smhdwy]?)$")
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_TIME_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_MID = re.compile(r"^(-?\d+):(-?\d+)(?::(-?\d+))?$")
_INT64_MAX = (1 << 63) - 1


def _q(part: str) -> str:
    return quote(part, safe="")


def topic_path(name: str) -> str:
    """``my-topic``, ``tenant/ns/topic`` or ``persistent://tenant/ns/topic`` -> ``/persistent/tenant/ns/topic``."""
    domain, rest = ("persistent", name)
    if "://" in name:
        domain, rest = name.split("://", 1)
        if domain not in ("persistent", "non-persistent"):
            raise click.BadParameter(f"{name!r}: the domain must be persistent or non-persistent")
    parts = rest.split("/")
    if len(parts) == 1 and "://" not in name:
        parts = ["public", "default", parts[0]]
    if len(parts) != 3 or not all(parts):
        raise click.BadParameter(f"{name!r}: expected persistent://tenant/namespace/topic (or a short name)")
    return f"/{domain}/" + "/".join(_q(p) for p in parts)


def schema_path(name: str) -> str:
    """The topic's path under ``/schemas``."""
    return "/schemas/" + topic_path(name).split("/", 2)[2]


def namespace_path(name: str) -> str:
    """``tenant/namespace`` -> ``tenant/namespace`` checked and quoted."""
    parts = name.split("/")
    if len(parts) != 2 or not all(parts):
        raise click.BadParameter(f"{name!r}: expected tenant/namespace")
    return "/".join(_q(p) for p in parts)


def size_mb(text: str) -> int:
    """A retention size (``-1``, ``4096``, ``10M``, ``16G``, ``3T``; bytes without a unit) in MB."""
    text = text.strip()
    if text == "-1":
        return -1
    m = _SIZE.match(text)
    if not m:
        raise click.BadParameter(f"{text!r}: expected a size such as 500M, 10G or -1 (unlimited)")
    return int(m.group(1)) * _SIZE_UNITS[m.group(2).lower()] // (1 << 20)


def seconds(text: str) -> int:
    """A relative time (``100m``, ``3h``, ``2d``, ``5w``, ``1y``; seconds without a unit)."""
    text = text.strip()
    m = _TIME.match(text)
    if not m:
        raise click.BadParameter(f"{text!r}: expected a time such as 30s, 100m, 3h, 2d or 5w")
    return int(m.group(1)) * _TIME_UNITS[m.group(2)]


def retention_minutes(text: str) -> int:
    return -1 if text.strip() == "-1" else seconds(text) // 60


def reset_timestamp_ms(text: str) -> int:
    """``-t`` of reset-cursor: a time back from now (``10m``) or a date-time (``2024-05-01T12:00:00``)."""
    try:
        return int((time.time() - seconds(text)) * 1000)
    except click.BadParameter:
        pass
    try:
        return int(datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected a relative time (10m, 2h, 1d) or an ISO date-time") from None


def message_id(text: str) -> dict:
    """``latest``, ``earliest`` or ``ledgerId:entryId[:partitionIndex]`` as the REST JSON message id."""
    if text == "latest":
        return {"ledgerId": _INT64_MAX, "entryId": _INT64_MAX, "partitionIndex": -1}
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
    m = _MID.match(text)
    if not m:
        raise click.BadParameter(f"{text!r}: expected latest, earliest or ledgerId:entryId")
    return {"ledgerId": int(m.group(1)), "entryId": int(m.group(2)),
            "partitionIndex": int(m.group(3)) if m.group(3) is not None else -1}


__all__ = ["actions_list", "csv_list", "message_id", "namespace_path", "reset_timestamp_ms", "retention_minutes", "schema_path", "seconds",
           "size_mb", "topic_path"]


def csv_list(text: str) -> list[str]:
    """``a,b, c`` -> ``["a", "b", "c"]`` (empty items dropped)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def actions_list(text: str) -> list[str]:
    """``--actions produce,consume`` as the JSON list the permissions call takes."""
    actions = [a.strip() for a in text.split(",") if a.strip()]
    if not actions:
        raise click.BadParameter("give one or more of produce, consume, functions, sources, sinks, packages")
    return actions
