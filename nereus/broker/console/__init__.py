"""The web console on the broker's HTTP port: ``/console`` (static pages) and ``/console/api`` (JSON).

The pages read Pulsar's admin API (``/admin/v2``) for tenants, namespaces, topics and
their stats, and the console's own JSON for what that API lacks: the cluster overview
(``overview.py``), the charts' recent series (``history.py``), a message browser
(``messages.py``, decoding in ``decoding.py``), Kafka consumer groups (``groups.py``), each topic's built-in
table (``tables.py``, its first rows: ``table_preview.py``) and any topic's stats in a cluster (``stats.py``). The pages are plain HTML, CSS and JavaScript shipped in
``static/``: nothing to build, nothing fetched from elsewhere.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web

from ..admin.common import CONTEXT
from . import groups, history, messages, overview, stats, table_preview, tables

STATIC = Path(__file__).parent / "static"


async def _index(_request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


def register(app: web.Application) -> None:
    """Add the console's routes (its JSON answers through the admin API's error middleware)."""
    app.router.add_get("/console", _index)
    app.router.add_get("/console/", _index)
    app.router.add_static("/console/static", STATIC)
    app[history.HISTORY] = history.History()
    app.router.add_get("/console/api/overview", overview.get_overview)
    app.router.add_get("/console/api/history", history.get_totals)
    app.router.add_get("/console/api/history/persistent/{tenant}/{namespace}/{topic}", history.get_topic)
    app.router.add_get("/console/api/kafka/groups", groups.list_groups)
    app.router.add_get("/console/api/kafka/groups/{group}", groups.get_group)
    app.router.add_get("/console/api/kafka/topic-groups/{tenant}/{namespace}/{topic}", groups.topic_groups)
    app.router.add_get("/console/api/tables/{tenant}/{namespace}/{topic}", tables.get_table)
    app.router.add_get("/console/api/tables/{tenant}/{namespace}/{topic}/rows", table_preview.get_rows)
    app.router.add_get("/console/api/messages/persistent/{tenant}/{namespace}/{topic}", messages.get_messages)
    app.router.add_get("/console/api/stats/persistent/{tenant}/{namespace}/{topic}", stats.get_stats)


def attach(app: web.Application) -> None:
    """Start sampling the charts' series (once the admin API runs; stopped with its tasks)."""
    ctx = app[CONTEXT]
    ctx.tasks.append(asyncio.ensure_future(history.run(app, ctx)))


__all__ = ["attach", "register"]
