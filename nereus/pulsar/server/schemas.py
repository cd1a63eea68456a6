"""Pulsar's side of the schema registry: the protocol's schema type numbers and messages.

The registry itself (versions, compatibility) is protocol-neutral:
``nereus.topics.schemas``, re-exported here for the Pulsar handlers.
"""

from __future__ import annotations

from ...ledger.policies import POLICIES_ROOT, policies_key  # noqa: F401 (re-exported)
from ...topics.schemas import (DEFAULT_STRATEGY, STRATEGIES, IncompatibleSchema, InvalidSchema,  # noqa: F401
                               SchemaInfo, check, check_for_consumer, delete, get, history, is_compatible, live,
                               put_if_absent, schema_key, strategy_of, version_bytes, version_from_bytes)
from ...codec.pulsar import pb

# Pulsar's SchemaType names for the protocol's Schema.Type names (the rest: CamelCase -> SNAKE_CASE).
_RENAMED = {"Bool": "BOOLEAN", "KeyValue": "KEY_VALUE", "LocalDate": "LOCAL_DATE", "LocalTime": "LOCAL_TIME",
            "LocalDateTime": "LOCAL_DATE_TIME", "ProtobufNative": "PROTOBUF_NATIVE", "AutoConsume": "AUTO_CONSUME"}
_TYPE_NAMES = {number: _RENAMED.get(name, name.upper()) for name, number in pb.Schema.Type.items()}
_TYPE_VALUES = {v: k for k, v in _TYPE_NAMES.items()}
TYPE_NAMES = frozenset(_TYPE_VALUES)


def type_name(value: int) -> str:
    return _TYPE_NAMES.get(value, "NONE")


def from_proto(schema: pb.Schema) -> tuple[str, bytes, dict]:
    return type_name(schema.type), bytes(schema.schema_data), {kv.key: kv.value for kv in schema.properties}


def to_proto(info: SchemaInfo, name: str) -> pb.Schema:
    schema = pb.Schema(name=name, schema_data=info.data, type=_TYPE_VALUES.get(info.type, 0))
    for key, value in sorted(info.props.items()):
        schema.properties.add(key=key, value=value)
    return schema


__all__ = ["DEFAULT_STRATEGY", "IncompatibleSchema", "InvalidSchema", "SchemaInfo", "STRATEGIES", "TYPE_NAMES",
           "check", "check_for_consumer", "delete", "from_proto", "get", "history", "is_compatible", "live",
           "policies_key", "put_if_absent", "schema_key", "strategy_of", "to_proto", "type_name", "version_bytes",
           "version_from_bytes"]
