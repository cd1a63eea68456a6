"""Broker configuration over REST, as Pulsar's ``/admin/v2/brokers`` answers it.

- ``GET /admin/v2/brokers/configuration``: the names of the settings that can be changed
  while the broker runs (Pulsar's dynamic configuration). Every Nereus setting is fixed
  at start-up, so the list is empty, and ``.../configuration/values`` is ``{}``.
- ``GET /admin/v2/brokers/configuration/runtime``: the settings this broker runs with, as
  strings under Pulsar's key names where Pulsar has the setting (``webServicePort``,
  ``brokerServicePort``, ``clusterName``, ``authenticationEnabled``, ...) and KoP's for the
  Kafka listener. An inline token key (``data:...``) is shown as ``******``.
- ``GET /admin/v2/brokers``: the live brokers of this broker's cluster.
"""

from __future__ import annotations

from dataclasses import fields
from urllib.parse import urlsplit, urlunsplit

from aiohttp import web

from ..options import camel, runtime_names
from .cluster import broker_id
from .common import AdminContext, AdminError, context

#: The name each BrokerOptions field is shown under (``tls.cert_file`` for a nested setting's field):
#: Pulsar's key where Pulsar has the setting, else the field's name camel-cased (nereus.broker.options).
NAMES = runtime_names()
#: What an inline (``data:``) key is shown as: the key itself never leaves the broker.
REDACTED = "******"


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(_text(item) for item in value)
    return str(value)


def _secret(value: str | None) -> str:
    """A key file's path as is; an inline key or token (``data:...``, ``token:...``, the text) redacted."""
    if not value:
        return ""
    return value if value.startswith(("file:", "/")) else REDACTED


def _url_without_password(url: str | None) -> str:
    """A catalog URL (``postgresql://user:password@host/db``) with its password redacted."""
    if not url:
        return ""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:{REDACTED}@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _nested(options) -> dict[str, str]:
    """The settings kept in nested objects, one Pulsar key each."""
    config = {}
    for path, key in NAMES.items():
        setting, _, name = path.partition(".")
        if name:
            config[key] = _text(getattr(getattr(options, setting), name))
    config["tokenSecretKey"] = _secret(options.authentication.token_secret_key)
    config["brokerClientAuthenticationParameters"] = _secret(options.broker_client_auth_params)
    config["sbtCatalogUri"] = _url_without_password(options.sbt_catalog_uri)
    config["saslAllowedMechanisms"] = _text(options.sasl.mechanisms) if options.sasl is not None else ""
    config["advertisedListeners"] = ",".join(f"{li.name}:{url}" for li in options.advertised_listeners
                                             for url in (li.pulsar_url, li.pulsar_tls_url, li.http_url, li.https_url)
                                             if url)
    config["bindAddresses"] = ",".join(f"{listener}:pulsar://{host}:{port}"
                                       for listener, host, port in options.bind_addresses)
    return config


_NESTED = {"authentication", "tls", "sasl", "advertised_listeners", "bind_addresses"}


def runtime_config(ctx: AdminContext) -> dict[str, str]:
    """The running broker's settings, every value a string (as Pulsar answers them); inline keys redacted."""
    node = ctx.node
    if node is None:
        raise AdminError(501, "This broker runs without a broker node")
    options = node.options
    config = {NAMES.get(f.name) or camel(f.name): _text(getattr(options, f.name))
              for f in fields(options) if f.name not in _NESTED}
    config.update(_nested(options))
    address = node.address
    # The ports actually bound (a configured 0 means any free port) and the addresses clients are given.
    config.update({
        "webServicePort": str(node.http_port), "brokerServicePort": str(node.pulsar.port),
        "advertisedAddress": address.kafka_host,
        "kafkaListeners": ",".join(f"{protocol}://{options.bind}:{port}"
                                   for protocol, port in node.kafka.listener_ports.items()),
        "kafkaAdvertisedListeners": ",".join(f"{protocol}://{address.kafka_host}:{port}"
                                             for protocol, port in node.kafka.listener_ports.items()),
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
