"""``GET /console/api/stats/persistent/{tenant}/{namespace}/{topic}``: a topic's stats, wherever it lives.

The admin API answers a topic's stats at its owner and redirects there from any
other broker; a page cannot follow that redirect to another origin, so in a cluster
it asks here and this broker follows it. ``?partitioned=true`` gives Pulsar's
partitioned-stats (partitions summed), which any broker gathers from their owners.
"""

from __future__ import annotations

from urllib.parse import quote

import aiohttp
from aiohttp import web

from ..admin.common import AdminError, context, flag

TIMEOUT = 30.0


async def get_stats(request: web.Request) -> web.Response:
    ctx = context(request)
    m = request.match_info
    topic = "/".join(quote(m[k], safe="") for k in ("tenant", "namespace", "topic"))
    which = "partitioned-stats?perPartition=false" if flag(request, "partitioned") else "stats"
    url = f"{ctx.placement.local.http_url}/admin/v2/persistent/{topic}/{which}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT)) as session:
            async with session.get(url, headers={"Accept": "application/json"}) as response:
                body = await response.read()
                return web.Response(body=body, status=response.status, content_type="application/json")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise AdminError(502, f"The topic's broker did not answer: {exc}") from None


__all__ = ["get_stats"]
