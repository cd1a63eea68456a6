"""Schema registry: versioned schemas per topic in the metadata plane, with compatibility checks.

A partitioned topic and its partitions share one schema (keyed by the base topic)::

    /nereus/pulsar/schemas/{quoted base topic}  ->  {"versions": [{"v", "type", "data", "props", "ts", "deleted"}]}

Versions count from 0. Deleting a schema appends a tombstone version; the versions
before the last tombstone no longer take part in checks. Registering a schema equal
to a live version (same type; Avro-style definitions compared as JSON) returns that
version; otherwise the new schema is checked against the live ones under the
topic's compatibility strategy: the topic policy ``schema_compatibility_strategy``,
else the namespace's, else the namespace's older ``schema_auto_update_compatibility_strategy``
(``AutoUpdateDisabled`` is ALWAYS_INCOMPATIBLE), else the broker's
``schemaCompatibilityStrategy`` (Pulsar's default, FULL).
AVRO, JSON and PROTOBUF (Pulsar describes all three with Avro definitions) are
checked by Avro schema resolution as Pulsar applies it (``avro_resolution``: records
matched field by field whatever their names, a reader field missing from the writer
needs a default, types match, promote or resolve through unions). PROTOBUF_NATIVE schemas (descriptor sets) may not
change their root message type, as Pulsar checks them; other types are compatible
with themselves only; KEY_VALUE schemas are checked part by part, the key schema
against the key schemas and the value schema against the value schemas (each under its
own type, from the ``key.schema.type`` / ``value.schema.type`` properties), as Pulsar's
KeyValue check does. A namespace with ``is_allow_auto_update_schema`` false takes
no new schema from clients (producers, consumers): only an admin upload adds one.

Schema types are Pulsar's SchemaType names ("AVRO", "JSON", ...); the protocol
edges translate their own type numbers (``nereus.pulsar.server.schemas``).
"""

from __future__ import annotations

import base64
import json
import struct
import time
from dataclasses import dataclass, field
from urllib.parse import quote

import avro.errors
import avro.schema

from ..ledger.naming import TopicName
from ..meta import MetadataStore
from ..meta import cas
from .avro_resolution import can_read
from ..ledger.policies import policies_key, topic_policies_key

SCHEMAS_ROOT = "/nereus/pulsar/schemas"
DEFAULT_STRATEGY = "FULL"
STRATEGIES = ("ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE",
              "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")
#: Pulsar's older namespace policy, ``SchemaAutoUpdateCompatibilityStrategy``, as the strategy it stands for.
AUTO_UPDATE_STRATEGIES = {"AutoUpdateDisabled": "ALWAYS_INCOMPATIBLE", "Backward": "BACKWARD", "Forward": "FORWARD",
                          "Full": "FULL", "AlwaysCompatible": "ALWAYS_COMPATIBLE",
                          "BackwardTransitive": "BACKWARD_TRANSITIVE", "ForwardTransitive": "FORWARD_TRANSITIVE",
                          "FullTransitive": "FULL_TRANSITIVE"}
AUTO_UPDATE_DISABLED = "Schema not found and schema auto updating is disabled."  # Pulsar's message
_VERSION = struct.Struct(">q")


class IncompatibleSchema(Exception):
    """The schema cannot be registered under the topic's compatibility strategy."""


class InvalidSchema(ValueError):
    """The schema definition cannot be parsed."""


@dataclass(frozen=True)
class SchemaInfo:
    version: int
    type: str  # Pulsar's SchemaType name
    data: bytes
    props: dict = field(default_factory=dict)
    timestamp: int = 0
    deleted: bool = False

    def to_json(self) -> dict:
        return {"v": self.version, "type": self.type, "data": base64.b64encode(self.data).decode(),
                "props": self.props, "ts": self.timestamp, "deleted": self.deleted}

    @classmethod
    def from_json(cls, value: dict) -> "SchemaInfo":
        return cls(value["v"], value["type"], base64.b64decode(value["data"]), value.get("props") or {},
                   value.get("ts", 0), value.get("deleted", False))

def schema_key(topic: TopicName) -> str:
    return f"{SCHEMAS_ROOT}/{quote(str(topic.base), safe='')}"


def version_bytes(version: int) -> bytes:
    """The protocol's schema version: Pulsar's 8-byte big-endian long."""
    return _VERSION.pack(version)


def version_from_bytes(data: bytes) -> int | None:
    return _VERSION.unpack(data)[0] if len(data) == 8 else None


async def history(meta: MetadataStore, topic: TopicName) -> list[SchemaInfo]:
    """Every stored version, tombstones included, oldest first."""
    rec = await meta.get(schema_key(topic))
    return [] if rec is None else [SchemaInfo.from_json(v) for v in json.loads(rec.value)["versions"]]


def live(versions: list[SchemaInfo]) -> list[SchemaInfo]:
    """The versions after the last tombstone."""
    for i in range(len(versions) - 1, -1, -1):
        if versions[i].deleted:
            return versions[i + 1:]
    return versions


async def get(meta: MetadataStore, topic: TopicName, version: int | None = None) -> SchemaInfo | None:
    """The latest version (which may be a tombstone), or the given one; None if absent."""
    versions = await history(meta, topic)
    if version is None:
        return versions[-1] if versions else None
    return next((v for v in versions if v.version == version), None)


async def _record(meta: MetadataStore, key: str) -> dict:
    rec = await meta.get(key)
    return json.loads(rec.value) if rec is not None else {}


async def strategy_of(meta: MetadataStore, topic: TopicName, default: str = DEFAULT_STRATEGY) -> str:
    """The compatibility strategy in force for ``topic`` (topic policy, namespace policies, then
    ``default``: the broker's ``schemaCompatibilityStrategy``)."""
    base = topic.base
    value = (await _record(meta, topic_policies_key(base.tenant, base.namespace, base.local))).get(
        "schema_compatibility_strategy")
    if value in STRATEGIES:
        return value
    policies = await _record(meta, policies_key(topic.tenant, topic.namespace))
    value = policies.get("schema_compatibility_strategy")
    if value in STRATEGIES:
        return value
    return AUTO_UPDATE_STRATEGIES.get(policies.get("schema_auto_update_compatibility_strategy"), default)


async def auto_update_allowed(meta: MetadataStore, topic: TopicName) -> bool:
    """May clients add schemas to ``topic``? (the namespace's ``is_allow_auto_update_schema``, default true)"""
    value = (await _record(meta, policies_key(topic.tenant, topic.namespace))).get("is_allow_auto_update_schema")
    return value is not False


async def put_if_absent(meta: MetadataStore, topic: TopicName, type_: str, data: bytes, props: dict | None = None,
                        *, strategy: str | None = None, from_client: bool = False,
                        default_strategy: str = DEFAULT_STRATEGY) -> int:
    """Register a schema; returns its version (an equal live version is reused).

    ``from_client``: a producer's or consumer's schema, which only reuses a version when
    the namespace does not allow auto updates. Raises IncompatibleSchema or InvalidSchema.
    """
    if type_ in ("AVRO", "JSON", "PROTOBUF") and data:
        _parse(type_, data)  # invalid definitions are refused before anything is stored
    strategy = strategy or await strategy_of(meta, topic, default_strategy)
    frozen = from_client and not await auto_update_allowed(meta, topic)
    result: list[int] = []

    def update(old: bytes | None) -> bytes | None:
        result.clear()
        versions = [SchemaInfo.from_json(v) for v in json.loads(old)["versions"]] if old else []
        current = live(versions)
        same = next((v for v in current if _same(v, type_, data)), None)
        if same is not None:
            result.append(same.version)
            return None
        if frozen:
            raise IncompatibleSchema(AUTO_UPDATE_DISABLED)
        check(strategy, type_, data, current, props)
        info = SchemaInfo(versions[-1].version + 1 if versions else 0, type_, data, dict(props or {}),
                          int(time.time() * 1000))
        result.append(info.version)
        return json.dumps({"versions": [v.to_json() for v in versions + [info]]}).encode()

    await cas.update(meta, schema_key(topic), update)
    return result[0]


async def delete(meta: MetadataStore, topic: TopicName, *, force: bool = False) -> int | None:
    """Delete the schema (tombstone version, or every version with ``force``); its version, None if absent."""
    if force:
        versions = await history(meta, topic)
        await meta.delete(schema_key(topic))
        return versions[-1].version if versions else None
    result: list[int] = []

    def update(old: bytes | None) -> bytes | None:
        result.clear()
        versions = [SchemaInfo.from_json(v) for v in json.loads(old)["versions"]] if old else []
        if not versions or versions[-1].deleted:
            if versions:
                result.append(versions[-1].version)
            return None
        tomb = SchemaInfo(versions[-1].version + 1, versions[-1].type, b"", {}, int(time.time() * 1000), True)
        result.append(tomb.version)
        return json.dumps({"versions": [v.to_json() for v in versions + [tomb]]}).encode()

    await cas.update(meta, schema_key(topic), update)
    return result[0] if result else None


async def check_for_consumer(meta: MetadataStore, topic: TopicName, type_: str, data: bytes,
                             props: dict | None = None, default_strategy: str = DEFAULT_STRATEGY) -> None:
    """A consumer's schema must be able to read the topic's (nothing to check when it has none)."""
    current = live(await history(meta, topic))
    if not current or any(_same(v, type_, data) for v in current):
        return
    check(await strategy_of(meta, topic, default_strategy), type_, data, current, props)


def _same(info: SchemaInfo, type_: str, data: bytes) -> bool:
    """Equal schemas; Avro-style definitions are compared as JSON (clients format them differently)."""
    if info.type != type_:
        return False
    if info.data == data:
        return True
    if type_ in ("AVRO", "JSON"):
        try:
            return json.loads(info.data) == json.loads(data)
        except ValueError:
            return False
    return False


def is_compatible(strategy: str, type_: str, data: bytes, current: list[SchemaInfo],
                  props: dict | None = None) -> bool:
    try:
        check(strategy, type_, data, current, props)
    except IncompatibleSchema:
        return False
    return True


# -- compatibility ------------------------------------------------------------------------
def check(strategy: str, type_: str, data: bytes, current: list[SchemaInfo], props: dict | None = None) -> None:
    """Raise IncompatibleSchema if ``(type_, data)`` may not follow the live versions ``current``.

    ``props``: the new schema's properties (a KEY_VALUE schema's part types are there)."""
    if not current or strategy == "ALWAYS_COMPATIBLE":
        return
    if strategy == "ALWAYS_INCOMPATIBLE":
        raise IncompatibleSchema(f"the compatibility strategy is {strategy}")
    latest = current[-1]
    if latest.type != type_:
        raise IncompatibleSchema(f"incompatible schema: the topic's schema type is {latest.type}, not {type_}")
    if type_ == "PROTOBUF_NATIVE":
        _check_protobuf_native(data, latest)
        return
    if type_ == "KEY_VALUE":
        _check_key_value(strategy, data, props or {}, current)
        return
    if type_ not in ("AVRO", "JSON", "PROTOBUF"):
        return  # other types are compatible with themselves
    new = _parse(type_, data)
    if new is None:
        return  # a JSON schema that is not an Avro definition: not checkable (Pulsar accepts it)
    against = current if strategy.endswith("_TRANSITIVE") else [latest]
    mode = strategy.removesuffix("_TRANSITIVE")
    for old_info in against:
        old = _parse(old_info.type, old_info.data)
        if old is None:
            continue
        if mode in ("BACKWARD", "FULL") and not can_read(new, old):
            raise IncompatibleSchema(f"incompatible schema: it cannot read data written with version "
                                     f"{old_info.version} ({mode})")
        if mode in ("FORWARD", "FULL") and not can_read(old, new):
            raise IncompatibleSchema(f"incompatible schema: version {old_info.version} cannot read data "
                                     f"written with it ({mode})")


_KV_LENGTH = struct.Struct(">i")
#: What a KEY_VALUE schema's part is when its properties do not say (Pulsar's default).
_KV_DEFAULT_TYPE = "BYTES"


def key_value_parts(data: bytes, props: dict) -> tuple[SchemaInfo, SchemaInfo] | None:
    """The key and value schemas of a KEY_VALUE schema (``[i32 length][key][i32 length][value]``);
    None if ``data`` is not laid out so."""
    parts, pos = [], 0
    for _ in range(2):
        if len(data) - pos < 4:
            return None
        (size,) = _KV_LENGTH.unpack_from(data, pos)
        if size < 0:
            size = 0  # Pulsar writes -1 for an empty part
        if pos + 4 + size > len(data):
            return None
        parts.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    types = [str(props.get(f"{side}.schema.type") or _KV_DEFAULT_TYPE).upper() for side in ("key", "value")]
    return SchemaInfo(-1, types[0], parts[0]), SchemaInfo(-1, types[1], parts[1])


def _check_key_value(strategy: str, data: bytes, props: dict, current: list[SchemaInfo]) -> None:
    new = key_value_parts(data, props)
    if new is None:
        raise InvalidSchema("a KEY_VALUE schema is [length][key schema][length][value schema]")
    olds = [(info.version, key_value_parts(info.data, info.props)) for info in current]
    for index, side in enumerate(("key", "value")):
        part = new[index]
        history = [SchemaInfo(version, parts[index].type, parts[index].data) for version, parts in olds
                   if parts is not None]
        try:
            check(strategy, part.type, part.data, history)
        except IncompatibleSchema as exc:
            raise IncompatibleSchema(f"the {side} schema: {exc}") from None


def _check_protobuf_native(data: bytes, latest: SchemaInfo) -> None:
    """Pulsar's rule for descriptor-based protobuf schemas: the root message type may not change."""
    def root(raw: bytes) -> str | None:
        try:
            value = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return None
        return value.get("rootMessageTypeName") if isinstance(value, dict) else None

    old, new = root(latest.data), root(data)
    if old is not None and new is not None and old != new:
        raise IncompatibleSchema(f"incompatible schema: the root message type changed from {old} to {new}")


def _parse(type_: str, data: bytes) -> avro.schema.Schema | None:
    """The Avro schema of a definition; None where there is nothing to check."""
    try:
        json.loads(data)
    except (ValueError, UnicodeDecodeError):
        if type_ == "JSON":
            return None
        raise InvalidSchema("the schema definition is not valid JSON") from None
    try:
        return avro.schema.parse(data.decode())
    except (avro.errors.AvroException, ValueError, TypeError, KeyError) as exc:
        if type_ in ("JSON", "PROTOBUF"):
            return None  # not an Avro definition: not checkable (Pulsar accepts it)
        raise InvalidSchema(f"invalid Avro schema: {exc}") from None


__all__ = ["AUTO_UPDATE_DISABLED", "AUTO_UPDATE_STRATEGIES", "auto_update_allowed", "DEFAULT_STRATEGY", "IncompatibleSchema", "InvalidSchema", "SchemaInfo", "STRATEGIES", "check", "key_value_parts",
           "check_for_consumer", "delete", "get", "history", "is_compatible", "live", "put_if_absent", "schema_key",
           "strategy_of", "version_bytes", "version_from_bytes"]
