"""DescribeClientQuotas (48) and AlterClientQuotas (49): the stored client quotas (``quota_store.py``)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import ALTER_CONFIGS, CLUSTER, DESCRIBE_CONFIGS
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from . import access
from .context import SecurityContext
from .quota_store import IP, KEYS, Entity

EXACT, DEFAULT, ANY = 0, 1, 2  # DescribeClientQuotas match types


def _entity(parts) -> Entity:
    """The request's entity checked; ValueError with Kafka's message when it is not valid."""
    entity = {}
    for part in parts:
        if part.entity_type not in KEYS:
            raise ValueError(f"Unknown entity type: {part.entity_type}")
        if part.entity_type in entity:
            raise ValueError(f"Duplicate entity type: {part.entity_type}")
        entity[part.entity_type] = part.entity_name
    if not entity:
        raise ValueError("Invalid empty client quota entity")
    if IP in entity and len(entity) > 1:
        raise ValueError("Invalid quota entity combination: ip cannot be combined with other entity types")
    return tuple(sorted(entity.items()))


def _ops(entity: Entity, ops) -> list[tuple[str, float | None]]:
    allowed = set.intersection(*(KEYS[t] for t, _ in entity))
    out = []
    for op in ops:
        if op.key not in allowed:
            raise ValueError(f"Invalid configuration key {op.key}")
        if not op.remove and not op.value > 0:
            raise ValueError(f"Invalid value {op.value} for {op.key}: it must be > 0")
        out.append((op.key, None if op.remove else float(op.value)))
    return out


async def handle_alter_client_quotas(ctx: SecurityContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    entry_cls, entity_cls = nested(cls, "EntryData"), nested(cls, "EntityData")
    allowed = await access.allowed(conn, CLUSTER, access.CLUSTER_NAME, ALTER_CONFIGS)
    results = []
    for entry in req.entries:
        code, message = ErrorCode.none, None
        try:
            if not allowed:
                code, message = ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
            else:
                entity = _entity(entry.entity)
                ops = _ops(entity, entry.ops)
                if not req.validate_only:
                    await ctx.quotas.alter(entity, ops)
        except ValueError as exc:
            code, message = ErrorCode.invalid_request, str(exc)
        results.append(make(entry_cls, error_code=code, error_message=message, entity=tuple(
            make(entity_cls, entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity)))
    return make(cls, throttle_time=NO_THROTTLE, entries=tuple(results))


def _matches(entity: Entity, components, strict: bool) -> bool:
    names = dict(entity)
    for c in components:
        if c.entity_type not in names:
            return False
        name = names[c.entity_type]
        if (c.match_type == EXACT and name != c.match) or (c.match_type == DEFAULT and name is not None) \
                or (c.match_type == ANY and name is None):
            return False
    return not strict or len(names) == len(components)


async def handle_describe_client_quotas(ctx: SecurityContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    entry_cls, entity_cls, value_cls = nested(cls, "EntryData"), nested(cls, "EntityData"), nested(cls, "ValueData")

    def error(code, message):
        return make(cls, throttle_time=NO_THROTTLE, error_code=code, error_message=message, entries=None)

    if not await access.allowed(conn, CLUSTER, access.CLUSTER_NAME, DESCRIBE_CONFIGS):
        return error(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    seen = set()
    for c in req.components:
        if c.entity_type not in KEYS or c.entity_type in seen or c.match_type not in (EXACT, DEFAULT, ANY) \
                or (c.match_type == EXACT) != (c.match is not None):
            return error(ErrorCode.invalid_request, f"Invalid quota filter component for entity type {c.entity_type}")
        seen.add(c.entity_type)
    entries = []
    for entity, quotas in sorted((await ctx.quotas.load()).items(), key=lambda kv: str(kv[0])):
        if quotas and _matches(entity, req.components, req.strict):
            entries.append(make(entry_cls, entity=tuple(make(entity_cls, entity_type=t, entity_name=n)
                                                        for t, n in entity),
                                values=tuple(make(value_cls, key=k, value=v) for k, v in sorted(quotas.items()))))
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, entries=tuple(entries))


__all__ = ["handle_alter_client_quotas", "handle_describe_client_quotas"]
