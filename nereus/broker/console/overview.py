"""``GET /console/api/overview``: the cluster at a glance (brokers with state, zone and load)."""

from __future__ import annotations

import importlib.util
from importlib import metadata

from aiohttp import web

from ..admin.cluster import broker_id
from ..admin.common import context


def _version() -> str:
    try:
        return metadata.version("nereus")
    except metadata.PackageNotFoundError:
        return "unknown"


def _broker(record, local: str) -> dict:
    address = record.address
    return {"name": address.name, "brokerId": broker_id(address), "nodeId": address.node_id, "zone": address.zone,
            "state": record.state, "load": record.load, "startedMs": record.started_ms,
            "pulsarUrl": address.pulsar_url, "httpUrl": address.http_url, "kafkaAddress": address.kafka_address,
            "local": address.name == local}


async def get_overview(request: web.Request) -> web.Response:
    ctx = context(request)
    node = ctx.node
    if node is not None:
        local = node.membership.name
        records = sorted(node.membership.brokers.values(), key=lambda r: r.address.node_id)
        brokers = [_broker(r, local) for r in records]
        state = node.membership.state
    else:  # an HTTP app attached without cluster membership (embedded use): this broker only
        local, brokers, state = "local", [], "Active"
    return web.json_response({
        "cluster": ctx.cluster_name, "broker": local, "state": state, "version": _version(), "brokers": brokers,
        "loadedTopics": len(ctx.pulsar.topics),
        "lakehouse": {"pyiceberg": importlib.util.find_spec("pyiceberg") is not None,
                      "pyspark": importlib.util.find_spec("pyspark") is not None},
    })


__all__ = ["get_overview"]
