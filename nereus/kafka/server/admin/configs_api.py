"""Topic, broker and group configs: DescribeConfigs, AlterConfigs, IncrementalAlterConfigs.

What is set lives in the metadata plane (``nereus.topics.topic_configs``); what is in
force, cached, is the catalog's ``TopicConfigs``, told here of each change.
"""

from __future__ import annotations

import logging
from typing import Callable

from kio.schema.errors import ErrorCode

from ....topics import topic_configs as store
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from ....auth import kafka_acls as acls
from ..catalog import config_defs as defs
from ..security import access
from ..catalog.config_defs import ConfigError
from .context import AdminContext

log = logging.getLogger(__name__)

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
TABLES = {TOPIC: (defs.TOPIC_DEFS, "topic"), BROKER: (defs.BROKER_DEFS, "broker"), GROUP: (defs.GROUP_DEFS, "group")}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


class ConfigRequestError(Exception):
    """A config change refused with a Kafka error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def validate_topic_configs(pairs) -> dict[str, str]:
    """``(name, value)`` pairs checked as Kafka checks them; ConfigRequestError(INVALID_CONFIG) if not."""
    out = {}
    for name, value in pairs:
        if name in out:
            raise ConfigRequestError(ErrorCode.invalid_request, f"Error due to duplicate config keys: {name}")
        try:
            out[name] = defs.validate(defs.TOPIC_DEFS, name, value)
        except ConfigError as exc:
            raise ConfigRequestError(ErrorCode.invalid_config, str(exc)) from None
    return out


# -- DescribeConfigs ---------------------------------------------------------------------
async def handle_describe_configs(ctx: AdminContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    result_cls, entry_cls = nested(cls, "DescribeConfigsResult"), nested(cls, "DescribeConfigsResourceResult")
    synonym_cls = nested(cls, "DescribeConfigsSynonym")
    with_synonyms = getattr(req, "include_synonyms", False)
    with_docs = getattr(req, "include_documentation", False)
    results = []
    for res in req.resources:
        code, message, resolved, table = ErrorCode.none, None, {}, {}
        try:
            if res.resource_type in (TOPIC, BROKER, BROKER_LOGGER, GROUP):  # before existence, as Kafka
                await _check_alter(conn, res.resource_type, res.resource_name, acls.DESCRIBE_CONFIGS)
            if res.resource_type == TOPIC:
                if await ctx.catalog.partition_count(res.resource_name) is None:
                    raise ConfigRequestError(ErrorCode.unknown_topic_or_partition,
                                             f"topic {res.resource_name!r} does not exist")
                resolved, table = await ctx.configs.topic(res.resource_name), defs.TOPIC_DEFS
            elif res.resource_type == BROKER:
                _broker_name(ctx, res.resource_name)
                resolved, table = defs.resolve_broker(await ctx.configs.broker_layers()), defs.BROKER_DEFS
            elif res.resource_type == GROUP:
                resolved, table = await ctx.configs.group(res.resource_name), defs.GROUP_DEFS
            else:
                raise ConfigRequestError(ErrorCode.invalid_request,
                                         f"resource type {res.resource_type} is not supported")
        except ConfigRequestError as exc:
            code, message = ErrorCode(exc.code), str(exc)
        keys = res.configuration_keys
        entries = []
        for name, r in sorted(resolved.items()):
            if keys is not None and name not in keys:
                continue
            d = table[name]
            read_only = res.resource_type == BROKER and not d.dynamic
            synonyms = tuple(make(synonym_cls, name=n, value=v, source=s) for n, v, s in r.synonyms) \
                if with_synonyms else ()
            entries.append(make(entry_cls, name=name, value=r.value, read_only=read_only, config_source=r.source,
                                is_default=r.source == defs.DEFAULT_CONFIG, is_sensitive=False, synonyms=synonyms,
                                config_type=d.type_id, documentation=d.doc if with_docs else None))
        results.append(make(result_cls, error_code=code, error_message=message, resource_type=res.resource_type,
                            resource_name=res.resource_name, configs=tuple(entries)))
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))


def _broker_name(ctx: AdminContext, name: str) -> str:
    """The broker resource's name if this cluster has it ("": the cluster-wide default)."""
    routing = ctx.routing
    if name == "" or name in {str(b.node_id) for b in routing.brokers()} or name == str(routing.local.node_id):
        return name
    raise ConfigRequestError(ErrorCode.invalid_request, f"unknown broker {name!r}")


# -- AlterConfigs / IncrementalAlterConfigs ------------------------------------------------
def _check_broker(changes: dict[str, str | None]) -> None:
    for name in changes:
        if name not in defs.BROKER_DEFS:
            raise ConfigRequestError(ErrorCode.invalid_config, f"Unknown broker config name: {name}")
    fixed = sorted(n for n in changes if not defs.BROKER_DEFS[n].dynamic)
    if fixed:
        raise ConfigRequestError(ErrorCode.invalid_request,
                                 f"Cannot update these configs dynamically: {', '.join(fixed)}")


def _validated(table, kind: str, configs: dict[str, str]) -> dict[str, str]:
    try:
        return {n: defs.validate(table, n, v, kind) for n, v in configs.items()}
    except ConfigError as exc:
        raise ConfigRequestError(ErrorCode.invalid_config, str(exc)) from None


def _incremental(table, kind: str, ops) -> Callable[[dict[str, str]], dict[str, str]]:
    """The pure change of IncrementalAlterConfigs ``ops`` (name, op, value), validated up front."""
    seen = set()
    for name, op, value in ops:
        if name in seen:
            raise ConfigRequestError(ErrorCode.invalid_request, f"Error due to duplicate config keys: {name}")
        seen.add(name)
        if op not in (SET, DELETE, APPEND, SUBTRACT):
            raise ConfigRequestError(ErrorCode.invalid_request, f"Unknown config operation {op} for {name}")
        if name not in table:
            raise ConfigRequestError(ErrorCode.invalid_config, f"Unknown {kind} config name: {name}")
        if op in (APPEND, SUBTRACT) and table[name].type != "list":
            verb = "append" if op == APPEND else "subtract"
            raise ConfigRequestError(ErrorCode.invalid_request,
                                     f"Config value {verb} is not allowed for config key: {name}")
        if op != DELETE:
            _validated(table, kind, {name: value})

    def change(configs: dict[str, str]) -> dict[str, str]:
        for name, op, value in ops:
            if op == SET:
                configs[name] = value
            elif op == DELETE:
                configs.pop(name, None)
            else:
                current = configs.get(name, table[name].default)
                items = defs.list_items(current)
                given = defs.list_items(value)
                items = items + [i for i in given if i not in items] if op == APPEND else \
                    [i for i in items if i not in given]
                configs[name] = ",".join(items)
        return _validated(table, kind, configs)

    return change


async def _check_alter(conn, resource_type: int, name: str, operation: int = acls.ALTER_CONFIGS) -> None:
    """ALTER_CONFIGS (or ``operation``) on the topic, group or (for a broker) the cluster, as Kafka's
    authorizer asks."""
    target, code = {TOPIC: (acls.TOPIC, ErrorCode.topic_authorization_failed),
                    GROUP: (acls.GROUP, ErrorCode.group_authorization_failed)}.get(
        resource_type, (acls.CLUSTER, ErrorCode.cluster_authorization_failed))
    if not await access.allowed(conn, target, name if target != acls.CLUSTER else access.CLUSTER_NAME,
                                 operation):
        raise ConfigRequestError(code, "Authorization failed.")


async def _alter(ctx: AdminContext, resource_type: int, name: str, change, validate_only: bool, broker_names) -> None:
    if resource_type == TOPIC:
        if await ctx.catalog.partition_count(name) is None:
            raise ConfigRequestError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        current = await store.read_topic_configs(ctx.meta, name)
        change(dict(current))  # validates the outcome
        if not validate_only:
            await store.update_topic_configs(ctx.meta, name, change)
            log.info("kafka: configs of topic %s changed", name)
            ctx.configs.changed(name)
    elif resource_type == BROKER:
        _broker_name(ctx, name)
        _check_broker(broker_names)
        current = await store.read_broker_configs(ctx.meta, name)
        change(dict(current))
        if not validate_only:
            await store.update_broker_configs(ctx.meta, name, change)
            log.info("kafka: dynamic configs of broker %r changed", name)
            ctx.configs.changed(None)
    elif resource_type == GROUP:
        if not name:
            raise ConfigRequestError(ErrorCode.invalid_request, "the group id is empty")
        change(dict(await store.read_group_configs(ctx.meta, name)))
        if not validate_only:
            await store.update_group_configs(ctx.meta, name, change)
            log.info("kafka: configs of group %s changed", name)
            ctx.configs.group_changed(name)
    else:
        raise ConfigRequestError(ErrorCode.invalid_request, f"resource type {resource_type} is not supported")


async def handle_alter_configs(ctx: AdminContext, conn, head, req):
    """Replace semantics: the configs given are all that stay set on the resource."""
    cls = response_schema(head.api_key, head.api_version)
    out = []
    for res in req.resources:
        code, message = ErrorCode.none, None
        try:
            given = {}
            for c in res.configs:
                if c.name in given:
                    raise ConfigRequestError(ErrorCode.invalid_request,
                                             f"Error due to duplicate config keys: {c.name}")
                given[c.name] = c.value
            table, kind = TABLES.get(res.resource_type, TABLES[BROKER])
            if res.resource_type == BROKER:
                _check_broker(given)
            wanted = _validated(table, kind, given) if res.resource_type in TABLES else {}
            await _check_alter(conn, res.resource_type, res.resource_name)
            await _alter(ctx, res.resource_type, res.resource_name, lambda _old: dict(wanted),
                         req.validate_only, given)
        except ConfigRequestError as exc:
            code, message = ErrorCode(exc.code), str(exc)
        out.append(make(nested(cls, "AlterConfigsResourceResponse"), error_code=code, error_message=message,
                        resource_type=res.resource_type, resource_name=res.resource_name))
    return make(cls, throttle_time=NO_THROTTLE, responses=tuple(out))


async def handle_incremental_alter_configs(ctx: AdminContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    out = []
    for res in req.resources:
        code, message = ErrorCode.none, None
        try:
            ops = [(c.name, c.config_operation, c.value) for c in res.configs]
            table, kind = TABLES.get(res.resource_type, TABLES[BROKER])
            if res.resource_type == BROKER:
                _check_broker({n: v for n, _, v in ops})
            change = _incremental(table, kind, ops) if res.resource_type in TABLES else None
            await _check_alter(conn, res.resource_type, res.resource_name)
            await _alter(ctx, res.resource_type, res.resource_name, change, req.validate_only,
                         {n: v for n, _, v in ops})
        except ConfigRequestError as exc:
            code, message = ErrorCode(exc.code), str(exc)
        out.append(make(nested(cls, "AlterConfigsResourceResponse"), error_code=code, error_message=message,
                        resource_type=res.resource_type, resource_name=res.resource_name))
    return make(cls, throttle_time=NO_THROTTLE, responses=tuple(out))

# -- ListConfigResources (KIP-1142) ---------------------------------------------------------------
#: ConfigResource types: topics, brokers, broker loggers, client metrics subscriptions, groups.
TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE = 2, 4, 8, 16, 32


async def handle_list_config_resources(ctx: AdminContext, conn, head, req):
    """The resources configs can be described for: every topic, every live broker (its configs and
    its loggers), the groups with configs set; no client metrics subscription exists here.
    v0 lists client metrics subscriptions only; no type named lists every type."""
    cls = response_schema(head.api_key, head.api_version)
    if not await access.allowed(conn, acls.CLUSTER, access.CLUSTER_NAME, acls.DESCRIBE_CONFIGS):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    config_resources=())
    types = set(getattr(req, "resource_types", None) or ()) if head.api_version >= 1 else {CLIENT_METRICS_RESOURCE}
    known = {TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE, CLIENT_METRICS_RESOURCE, GROUP_RESOURCE}
    if types - known:
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.unsupported_version,
                    config_resources=())
    types = types or known
    found: list[tuple[str, int]] = []
    if TOPIC_RESOURCE in types:
        listed = [(name,) for name in sorted(await ctx.catalog.describe_all())]
        found += [(name, TOPIC_RESOURCE) for name, in await access.allowed_items(conn, acls.TOPIC, listed,
                                                                                 acls.DESCRIBE_CONFIGS)]
    brokers = [str(b.node_id) for b in ctx.routing.brokers()]
    if BROKER_RESOURCE in types:
        found += [(node, BROKER_RESOURCE) for node in brokers]
    if BROKER_LOGGER_RESOURCE in types:
        found += [(node, BROKER_LOGGER_RESOURCE) for node in brokers]
    if GROUP_RESOURCE in types:
        found += [(group, GROUP_RESOURCE) for group in await store.configured_groups(ctx.meta)
                  if await access.allowed(conn, acls.GROUP, group, acls.DESCRIBE_CONFIGS)]
    rcls = nested(cls, "ConfigResource")
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, config_resources=tuple(
        make(rcls, resource_name=name, resource_type=kind) for name, kind in found))


__all__ = ["ConfigRequestError", "handle_alter_configs", "handle_describe_configs", "handle_incremental_alter_configs",
           "handle_list_config_resources", "validate_topic_configs"]
