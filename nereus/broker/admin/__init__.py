"""Pulsar-compatible admin REST API (``/admin/v2``) on the broker's HTTP listener.

One module per resource: tenants, namespaces (and their policies), topics,
subscriptions, stats, schemas; retention.py applies retention policies.
``register(app)`` adds the routes and the error middleware; ``attach(app, ...)``
hands them the running storage, metadata store and PulsarService (until then
they answer 503), makes sure ``public`` and ``public/default`` exist and starts
the background tasks (retention, stats rate sampling), stopped at app cleanup.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from . import namespaces, retention, schemas, stats, subscriptions, tenants, topics
from .common import CONTEXT, AdminContext, errors


def register(app: web.Application) -> None:
    app[CONTEXT] = AdminContext()
    app.middlewares.append(errors)
    for module in (tenants, namespaces, topics, subscriptions, stats, schemas):
        module.add_routes(app.router)
    app.on_cleanup.append(_stop)


async def attach(app: web.Application, *, storage, meta, pulsar,
                 retention_interval: float = retention.INTERVAL) -> None:
    """Serve the admin API over these services (call once the Pulsar listener runs)."""
    ctx = app[CONTEXT]
    await tenants.ensure_tenant(meta, "public")
    await namespaces.ensure_namespace(meta, "public", "default")
    ctx.storage, ctx.meta, ctx.pulsar = storage, meta, pulsar
    ctx.tasks += [asyncio.ensure_future(retention.run(ctx, retention_interval)),
                  asyncio.ensure_future(stats.sample_loop())]


async def _stop(app: web.Application) -> None:
    ctx = app[CONTEXT]
    tasks, ctx.tasks = list(ctx.tasks), []
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    ctx.pulsar = None


__all__ = ["attach", "register"]
