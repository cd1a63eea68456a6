"""Printing answers: readable tables by default, the REST JSON as is with ``--json``.

Generic shapes: a list of names prints one per line; a list of objects prints as a
table; an object prints as ``KEY  VALUE`` rows with nested objects under dotted keys.
Stats get their own views (``stats_view``): the topic's figures, then a table per
kind of nested entry (publishers, subscriptions, consumers, partitions, cursors).
"""

from __future__ import annotations

import json
import re

import click

_WORD_BREAK = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.2f}" if value != int(value) else str(int(value))
    if isinstance(value, (dict, list)):
        if value and all(not isinstance(v, (dict, list)) for v in value):
            return ",".join(_cell(v) for v in value) if isinstance(value, list) else json.dumps(value)
        return json.dumps(value, separators=(",", ":")) if value else ("{}" if isinstance(value, dict) else "[]")
    return " ".join(str(value).split())  # one line per row, whatever the text holds


def header(name: str) -> str:
    """``msgBacklog`` -> ``MSG_BACKLOG``: one word per column, for readers and for ``awk``."""
    return _WORD_BREAK.sub("_", name).upper()


def table(rows: list[list], headers: list[str]) -> str:
    """Left-aligned columns under upper-case headers."""
    cells = [[header(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells)


def flatten(value: dict, prefix: str = "") -> list[tuple[str, object]]:
    """Nested objects as dotted keys; lists stay values."""
    rows = []
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, dict) and item:
            rows += flatten(item, name + ".")
        else:
            rows.append((name, item))
    return rows


def key_values(value: dict) -> str:
    return table([list(row) for row in flatten(value)], ["key", "value"])


def records(items: list[dict], columns: list[str] | None = None) -> str:
    columns = columns or list(dict.fromkeys(k for item in items for k in item))
    return table([[item.get(c) for c in columns] for item in items], columns)


def generic(value) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        if value and all(isinstance(v, dict) for v in value):
            return records(value)
        return "\n".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return key_values(value) if value else "(empty)"
    return _cell(value)


# -- stats -------------------------------------------------------------------------------------
TOPIC_FIGURES = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "msgInCounter", "bytesInCounter",
                 "msgOutCounter", "bytesOutCounter", "averageMsgSize", "storageSize", "backlogSize")
SUB_COLUMNS = ("type", "msgBacklog", "unackedMessages", "msgRateOut", "msgOutCounter", "msgRateRedeliver")


def _section(title: str, body: str) -> str:
    return f"\n{title}\n{body}"


def stats_view(stats: dict) -> str:
    """A topic's (or partitioned topic's) stats: figures, publishers, subscriptions, consumers, partitions."""
    figures = [[k, stats[k]] for k in TOPIC_FIGURES if k in stats]
    if "metadata" in stats:
        figures.append(["partitions", stats["metadata"].get("partitions")])
    out = [table(figures, ["stat", "value"])]
    publishers = stats.get("publishers") or []
    if publishers:
        out.append(_section("Publishers", records(publishers, [c for c in (
            "producerName", "producerId", "address", "accessMode", "msgRateIn", "msgThroughputIn")
            if any(c in p for p in publishers)])))
    subs = stats.get("subscriptions") or {}
    if subs:
        rows = [[name] + [sub.get(c) for c in SUB_COLUMNS] + [len(sub.get("consumers") or [])]
                for name, sub in sorted(subs.items())]
        out.append(_section("Subscriptions", table(rows, ["subscription", *SUB_COLUMNS, "consumers"])))
        consumers = [dict(subscription=name, **c) for name, sub in sorted(subs.items())
                     for c in sub.get("consumers") or []]
        if consumers:
            out.append(_section("Consumers", records(consumers, [c for c in (
                "subscription", "consumerName", "address", "msgRateOut", "msgOutCounter", "unackedMessages",
                "availablePermits") if any(c in x for x in consumers)])))
    parts = stats.get("partitions") or {}
    if parts:
        rows = [[name, p.get("msgInCounter"), p.get("msgOutCounter"), p.get("storageSize"), p.get("backlogSize"),
                 len(p.get("publishers") or []), len(p.get("subscriptions") or {})] for name, p in sorted(parts.items())]
        out.append(_section("Partitions", table(rows, ["partition", "msgInCounter", "msgOutCounter", "storageSize",
                                                        "backlogSize", "publishers", "subscriptions"])))
    return "\n".join(out)


def internal_stats_view(stats: dict) -> str:
    """A topic's internal stats: the ledger figures, its ledgers and its cursors."""
    figures = [[k, v] for k, v in stats.items() if not isinstance(v, (dict, list))]
    out = [table(figures, ["stat", "value"])]
    if stats.get("ledgers"):
        out.append(_section("Ledgers", records(stats["ledgers"])))
    cursors = stats.get("cursors") or {}
    if cursors:
        columns = {"markDeletePosition": "markDelete", "readPosition": "read",
                   "numberOfEntriesSinceFirstNotAckedMessage": "sinceFirstUnacked",
                   "individuallyDeletedMessages": "individuallyDeleted", "active": "active"}
        rows = [[name] + [c.get(k) for k in columns] for name, c in sorted(cursors.items())]
        out.append(_section("Cursors", table(rows, ["cursor", *columns.values()])))
    return "\n".join(out)


def emit(value, *, as_json: bool, view=generic) -> None:
    """Print an answer: ``--json`` the REST JSON as is (``null`` when empty), else ``view(value)`` (None too)."""
    if as_json:
        click.echo(json.dumps(value, indent=2))
        return
    text = view(value)
    if text:
        click.echo(text)


__all__ = ["emit", "generic", "internal_stats_view", "key_values", "records", "stats_view", "table"]
