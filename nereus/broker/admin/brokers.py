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

from aiohttp import web

from .cluster import broker_id
from .common import AdminContext, AdminError, context

#: BrokerOptions fields under Pulsar's names; the others keep their own name, camel-cased.
PULSAR_NAMES = {"bind": "bindAddress", "http_port": "webServicePort", "pulsar_port": "brokerServicePort",
                "advertised_address": "advertisedAddress", "cluster_name": "clusterName",
                "internal_listener": "internalListenerName", "auto_topic_creation": "allowAutoTopicCreation",
                "auto_topic_creation_type": "allowAutoTopicCreationType", "default_partitions": "defaultNumPartitions",
                "max_partitions_per_topic": "maxNumPartitionsPerPartitionedTopic",
                "deduplication": "brokerDeduplicationEnabled", "pulsar_tls_port": "brokerServicePortTls",
                "http_tls_port": "webServicePortTls", "default_retention_minutes": "defaultRetentionTimeInMinutes",
                "default_retention_mb": "defaultRetentionSizeInMB"}
#: The fields of the nested settings (AuthSettings, TlsOptions) under Pulsar's names.
AUTH_NAMES = {"enabled": "authenticationEnabled", "providers": "authenticationProviders",
              "token_secret_key": "tokenSecretKey", "token_public_key": "tokenPublicKey",
              "token_auth_claim": "tokenAuthClaim", "basic_auth_conf": "basicAuthConf",
              "anonymous_user_role": "anonymousUserRole", "super_user_roles": "superUserRoles",
              "refresh_check_seconds": "authenticationRefreshCheckSeconds",
              "authenticate_metrics": "authenticateMetricsEndpoint", "authorization_enabled": "authorizationEnabled",
              "authorization_wildcards": "authorizationAllowWildcardsMatching"}
TLS_NAMES = {"cert_file": "tlsCertificateFilePath", "key_file": "tlsKeyFilePath",
             "trust_file": "tlsTrustCertsFilePath", "allow_insecure": "tlsAllowInsecureConnection",
             "require_client_cert": "tlsRequireTrustedClientCertOnConnect"}
#: What an inline (``data:``) key is shown as: the key itself never leaves the broker.
REDACTED = "******"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(_text(item) for item in value)
    return str(value)


def _secret(value: str | None) -> str:
    """A key file's path as is; an inline key (``data:...``, or the key's text) redacted."""
    if not value:
        return ""
    return value if value.startswith(("file:", "/")) else REDACTED


def _nested(options) -> dict[str, str]:
    """The settings kept in nested objects, one Pulsar key each."""
    auth, tls = options.authentication, options.tls
    config = {key: _text(getattr(auth, name)) for name, key in AUTH_NAMES.items()}
    config["tokenSecretKey"] = _secret(auth.token_secret_key)
    config.update({key: _text(getattr(tls, name)) for name, key in TLS_NAMES.items()})
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
    config = {PULSAR_NAMES.get(f.name, _camel(f.name)): _text(getattr(options, f.name))
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
