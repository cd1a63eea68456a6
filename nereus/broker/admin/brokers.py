"""Broker configuration over REST, as Pulsar's ``/admin/v2/brokers`` answers it.

- ``GET /admin/v2/brokers/configuration``: the names of the settings that can be changed
  while the broker runs (Pulsar's dynamic configuration). Every Nereus setting is fixed
  at start-up, so the list is empty, and ``.../configuration/values`` is ``{}``.
- ``GET /admin/v2/brokers/configuration/runtime``: the settings this broker runs with, as
  strings under Pulsar's key names where Pulsar has the setting (``webServicePort``,
  ``brokerServicePort``, ``clusterName``, ...) and KoP's for the Kafka listener.
- ``GET /admin/v2/brokers``: the live brokers of this broker's cluster.
"""

from __future__ import annotations

from dataclasses import fields

from aiohttp import web

from .cluster import broker_id
from .common import AdminContext, AdminError, context

#: BrokerOptions fields under Pulsar's names; the others keep their own name, camel-cased.
PULSAR_NAMES = {"bind": "bindAddress", "http_port": "webServicePort", "pulsar_port": "brokerServicePort",
                "advertised_address": "advertisedAddress", "cluster_name": "clusterName"}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def runtime_config(ctx: AdminContext) -> dict[str, str]:
    """The running broker's settings, every value a string (as Pulsar answers them)."""
    node = ctx.node
    if node is None:
        raise AdminError(501, "This broker runs without a broker node")
    options = node.options
    config = {PULSAR_NAMES.get(f.name, _camel(f.name)): _text(getattr(options, f.name)) for f in fields(options)}
    address = node.address
    # The ports actually bound (a configured 0 means any free port) and the addresses clients are given.
    config.update({
        "webServicePort": str(node.http_port), "brokerServicePort": str(node.pulsar.port),
        "advertisedAddress": address.kafka_host,
        "kafkaListeners": f"PLAINTEXT://{options.bind}:{node.kafka.port}",
        "kafkaAdvertisedListeners": f"PLAINTEXT://{address.kafka_address}",
        "brokerName": node.membership.name,
    })
    return dict(sorted(config.items()))


async def dynamic_config_names(request: web.Request) -> web.Response:
    context(request)
    return web.json_response([])


async def dynamic_config_values(request: web.Request) -> web.Response:
    context(request)
    return web.json_response({})


async def runtime(request: web.Request) -> web.Response:
    return web.json_response(runtime_config(context(request)))


async def local_brokers(request: web.Request) -> web.Response:
    ctx = context(request)
    if ctx.node is None:
        raise AdminError(501, "This broker runs without cluster membership")
    return web.json_response(sorted(broker_id(r.address) for r in ctx.node.membership.brokers.values()))


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/admin/v2/brokers", local_brokers)
    router.add_get("/admin/v2/brokers/configuration", dynamic_config_names)
    router.add_get("/admin/v2/brokers/configuration/values", dynamic_config_values)
    router.add_get("/admin/v2/brokers/configuration/runtime", runtime)


__all__ = ["add_routes", "runtime_config"]
