"""Schema registry: versioned schemas per topic in the metadata plane, with compatibility checks.

A partitioned topic and its partitions share one schema (keyed by the base topic)::

    /nereus/pulsar/schemas/{quoted base topic}  ->  {"versions": [{"v", "type", "data", "props", "ts", "deleted"}]}

Versions count from 0. Deleting a schema appends a tombstone version; the versions
before the last tombstone no longer take part in checks. Registering a schema equal
to a live version (same type; Avro-style definitions compared as JSON) returns that
version; otherwise the new schema is checked against the live ones under the
namespace's compatibility strategy (``schema_compatibility_strategy`` of the
namespace policies; Pulsar's default, FULL, when unset).
AVRO and JSON (Avro-style definitions) are checked by Avro schema resolution: a
reader field missing from the writer needs a default, types must match or promote.
"""

from __future__ import annotations

import base64
import json
import struct
import time
from dataclasses import dataclass, field
from urllib.parse import quote

from ...ledger.naming import TopicName
from ...meta import MetadataStore
from ...meta import cas
from ...topics.policies import POLICIES_ROOT, policies_key  # noqa: F401 (re-exported)
from ..codec import pb

SCHEMAS_ROOT = "/nereus/pulsar/schemas"
DEFAULT_STRATEGY = "FULL"
STRATEGIES = ("ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE",
              "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")
_VERSION = struct.Struct(">q")

# Pulsar's SchemaType names for the protocol's Schema.Type names (the rest: CamelCase -> SNAKE_CASE).
_RENAMED = {"Bool": "BOOLEAN", "KeyValue": "KEY_VALUE", "LocalDate": "LOCAL_DATE", "LocalTime": "LOCAL_TIME",
            "LocalDateTime": "LOCAL_DATE_TIME", "ProtobufNative": "PROTOBUF_NATIVE", "AutoConsume": "AUTO_CONSUME"}
_TYPE_NAMES = {number: _RENAMED.get(name, name.upper()) for name, number in pb.Schema.Type.items()}
_TYPE_VALUES = {v: k for k, v in _TYPE_NAMES.items()}
TYPE_NAMES = frozenset(_TYPE_VALUES)


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

    def to_proto(self, name: str) -> pb.Schema:
        schema = pb.Schema(name=name, schema_data=self.data, type=_TYPE_VALUES.get(self.type, 0))
        for key, value in sorted(self.props.items()):
            schema.properties.add(key=key, value=value)
        return schema


def schema_key(topic: TopicName) -> str:
    return f"{SCHEMAS_ROOT}/{quote(str(topic.base), safe='')}"


def version_bytes(version: int) -> bytes:
    """The protocol's schema version: Pulsar's 8-byte big-endian long."""
    return _VERSION.pack(version)


def version_from_bytes(data: bytes) -> int | None:
    return _VERSION.unpack(data)[0] if len(data) == 8 else None


def type_name(value: int) -> str:
    return _TYPE_NAMES.get(value, "NONE")


def from_proto(schema: pb.Schema) -> tuple[str, bytes, dict]:
    return type_name(schema.type), bytes(schema.schema_data), {kv.key: kv.value for kv in schema.properties}


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


async def strategy_of(meta: MetadataStore, topic: TopicName) -> str:
    rec = await meta.get(policies_key(topic.tenant, topic.namespace))
    value = json.loads(rec.value).get("schema_compatibility_strategy") if rec is not None else None
    return value if value in STRATEGIES else DEFAULT_STRATEGY


async def put_if_absent(meta: MetadataStore, topic: TopicName, type_: str, data: bytes, props: dict | None = None,
                        *, strategy: str | None = None) -> int:
    """Register a schema; returns its version (an equal live version is reused).

    Raises IncompatibleSchema or InvalidSchema.
    """
    if type_ in ("AVRO", "JSON", "PROTOBUF") and data:
        _parse(type_, data)  # invalid definitions are refused before anything is stored
    strategy = strategy or await strategy_of(meta, topic)
    result: list[int] = []

    def update(old: bytes | None) -> bytes | None:
        result.clear()
        versions = [SchemaInfo.from_json(v) for v in json.loads(old)["versions"]] if old else []
        current = live(versions)
        same = next((v for v in current if _same(v, type_, data)), None)
        if same is not None:
            result.append(same.version)
            return None
        check(strategy, type_, data, current)
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


async def check_for_consumer(meta: MetadataStore, topic: TopicName, type_: str, data: bytes) -> None:
    """A consumer's schema must be able to read the topic's (nothing to check when it has none)."""
    current = live(await history(meta, topic))
    if not current or any(_same(v, type_, data) for v in current):
        return
    check(await strategy_of(meta, topic), type_, data, current)


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


def is_compatible(strategy: str, type_: str, data: bytes, current: list[SchemaInfo]) -> bool:
    try:
        check(strategy, type_, data, current)
    except IncompatibleSchema:
        return False
    return True


# -- compatibility ------------------------------------------------------------------------
def check(strategy: str, type_: str, data: bytes, current: list[SchemaInfo]) -> None:
    """Raise IncompatibleSchema if ``(type_, data)`` may not follow the live versions ``current``."""
    if not current or strategy == "ALWAYS_COMPATIBLE":
        return
    if strategy == "ALWAYS_INCOMPATIBLE":
        raise IncompatibleSchema(f"the compatibility strategy is {strategy}")
    latest = current[-1]
    if latest.type != type_:
        raise IncompatibleSchema(f"incompatible schema: the topic's schema type is {latest.type}, not {type_}")
    if type_ not in ("AVRO", "JSON"):
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
        if mode in ("BACKWARD", "FULL") and not _can_read(new, old):
            raise IncompatibleSchema(f"incompatible schema: it cannot read data written with version "
                                     f"{old_info.version} ({mode})")
        if mode in ("FORWARD", "FULL") and not _can_read(old, new):
            raise IncompatibleSchema(f"incompatible schema: version {old_info.version} cannot read data "
                                     f"written with it ({mode})")


_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
               "string": {"bytes"}, "bytes": {"string"}}


class _Avro:
    """A parsed Avro definition with its named types."""

    def __init__(self, root) -> None:
        self.root = root
        self.names: dict[str, dict] = {}
        self._collect(root, "")

    def _collect(self, node, namespace: str) -> None:
        if isinstance(node, list):
            for branch in node:
                self._collect(branch, namespace)
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind in ("record", "error", "enum", "fixed"):
                name = node.get("name")
                if not isinstance(name, str):
                    raise InvalidSchema(f"a {kind} needs a name")
                namespace = node.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
                short = name.rsplit(".", 1)[-1]
                self.names[f"{namespace}.{short}" if namespace else short] = node
                self.names.setdefault(short, node)
                for f in node.get("fields", ()) if kind != "enum" else ():
                    if not isinstance(f, dict) or "name" not in f or "type" not in f:
                        raise InvalidSchema(f"invalid field in {name}: {f!r}")
                    self._collect(f["type"], namespace)
            elif kind == "array":
                self._collect(node.get("items"), namespace)
            elif kind == "map":
                self._collect(node.get("values"), namespace)
            elif isinstance(kind, (dict, list)):
                self._collect(kind, namespace)

    def resolve(self, node):
        """Primitive name, a named type's dict, a union list, or an array/map dict."""
        while True:
            if isinstance(node, str):
                if node in _PRIMITIVES:
                    return node
                found = self.names.get(node) or self.names.get(node.rsplit(".", 1)[-1])
                if found is None:
                    raise InvalidSchema(f"unknown type {node!r}")
                return found
            if isinstance(node, dict):
                kind = node.get("type")
                if isinstance(kind, str) and kind in _PRIMITIVES:
                    return kind  # logical types are read as their underlying type
                if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind not in
                                                       ("record", "error", "enum", "fixed", "array", "map")):
                    node = kind
                    continue
                return node
            if isinstance(node, list):
                return node
            raise InvalidSchema(f"invalid type {node!r}")


def _parse(type_: str, data: bytes) -> _Avro | None:
    try:
        root = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        if type_ == "JSON":
            return None
        raise InvalidSchema("the schema definition is not valid JSON") from None
    if type_ == "PROTOBUF":
        return None
    if type_ == "JSON" and not (isinstance(root, dict) and root.get("type") == "record"):
        return None
    return _Avro(root)


def _can_read(reader: _Avro, writer: _Avro) -> bool:
    return _reads(reader, reader.root, writer, writer.root, set())


def _reads(ra: _Avro, r, wa: _Avro, w, seen: set) -> bool:
    r, w = ra.resolve(r), wa.resolve(w)
    if isinstance(w, list):
        return all(_reads(ra, r, wa, branch, seen) for branch in w)
    if isinstance(r, list):
        return any(_reads(ra, branch, wa, w, seen) for branch in r)
    if isinstance(r, str) or isinstance(w, str):
        return isinstance(r, str) and isinstance(w, str) and (r == w or r in _PROMOTIONS.get(w, ()))
    kind = "record" if r.get("type") == "error" else r.get("type")
    if kind != ("record" if w.get("type") == "error" else w.get("type")):
        return False
    if kind == "array":
        return _reads(ra, r.get("items"), wa, w.get("items"), seen)
    if kind == "map":
        return _reads(ra, r.get("values"), wa, w.get("values"), seen)
    if str(r.get("name")).rsplit(".", 1)[-1] != str(w.get("name")).rsplit(".", 1)[-1]:
        return False
    if kind == "fixed":
        return r.get("size") == w.get("size")
    if kind == "enum":
        return set(w.get("symbols", ())) <= set(r.get("symbols", ())) or "default" in r
    key = (id(r), id(w))
    if key in seen:
        return True  # recursive type: assume compatible while checking it
    seen.add(key)
    written = {f["name"]: f for f in w.get("fields", ())}
    for f in w.get("fields", ()):
        for alias in f.get("aliases", ()):
            written.setdefault(alias, f)
    for f in r.get("fields", ()):
        source = written.get(f["name"]) or next((written[a] for a in f.get("aliases", ()) if a in written), None)
        if source is None:
            if "default" not in f:
                return False
        elif not _reads(ra, f["type"], wa, source["type"], seen):
            return False
    return True


__all__ = ["DEFAULT_STRATEGY", "IncompatibleSchema", "InvalidSchema", "SchemaInfo", "STRATEGIES", "TYPE_NAMES",
           "check", "check_for_consumer", "delete", "from_proto", "get", "history", "is_compatible", "live",
           "policies_key", "put_if_absent", "schema_key", "strategy_of", "type_name", "version_bytes",
           "version_from_bytes"]
