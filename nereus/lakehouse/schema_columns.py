"""The fields of a topic's AVRO or JSON schema as extra columns decoded from ``value``.

The columns are the top-level fields of the topic's latest live schema in the
registry (``pulsar/server/schemas.py``), after the fixed columns; a field whose name
is a fixed column's is renamed ``value_{name}``. Avro types map to Spark types:
records -> struct, arrays, maps, enums -> string, fixed/bytes -> binary, a union with
null -> the other branch, nullable; a union of several types and a recursive
reference -> string (JSON text); the logical types date, timestamp-*, local-timestamp-*,
decimal (precision <= 38), time-* (as a count since midnight) and uuid.

The columns are fixed when Spark analyzes the query (a stream: when it starts); fields a
later schema version adds appear after a restart.

A message is decoded with the schema version it was written with (its
``schema_version``), resolved to the latest one for Avro (new fields get their
defaults); a version unknown to the registry, or a Kafka record, is decoded with the
latest. A value that cannot be decoded, or a field that does not fit its column,
gives null columns: decoding never fails a query.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
from collections.abc import Callable
from dataclasses import dataclass

import fastavro
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, DataType, DateType, DecimalType, DoubleType,
                               FloatType, IntegerType, LongType, MapType, StringType, StructField, StructType,
                               TimestampNTZType, TimestampType)

from . import rows as _rows
from ..ledger.naming import TopicName
from ..topics import schemas as _schemas

DECODED_TYPES = ("AVRO", "JSON")
FIXED_COLUMNS = frozenset(_rows.ROW_FIELDS)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_DATE = dt.date(1970, 1, 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
_NAMED = ("record", "error", "enum", "fixed")


class _Unfit(ValueError):
    """A value that does not fit its column (the column becomes null)."""


class _Undecodable(ValueError):
    """A value that is not a record of the topic's schema."""


@dataclass(frozen=True)
class TopicSchemas:
    """The live versions of a topic's AVRO or JSON schema: version -> definition (JSON text)."""

    type: str
    definitions: dict[int, str]
    latest: int


async def latest_value_columns(meta, topic: str) -> ValueColumns | None:
    """The schema columns of ``topic``'s latest AVRO/JSON record schema; None without one."""
    schemas = await topic_schemas(meta, topic)
    if schemas is None:
        return None
    return ValueColumns(tuple(columns_for(schemas.definitions[schemas.latest])), schemas)


async def topic_schemas(meta, topic: str) -> TopicSchemas | None:
    """The topic's decodable schema versions; None without a live AVRO/JSON record schema."""
    live = _schemas.live(await _schemas.history(meta, TopicName.parse(topic)))
    if not live or live[-1].type not in DECODED_TYPES:
        return None
    latest = live[-1]
    try:
        root = json.loads(latest.data)
    except ValueError:
        return None
    if not (isinstance(root, dict) and root.get("type") == "record"):
        return None  # e.g. a JSON Schema document: no Avro-style fields to map
    definitions = {v.version: v.data.decode("utf-8", "replace") for v in live if v.type == latest.type}
    return TopicSchemas(latest.type, definitions, latest.version)


def columns_for(definition: str) -> list[StructField]:
    """The extra columns of a record definition (every one nullable: undecodable values are null)."""
    avro = _Avro(json.loads(definition))
    out = []
    for name, field in _fields_by_column(avro).items():
        try:
            dtype = avro.column(field["type"], ())[0]
        except (ValueError, KeyError, TypeError, AttributeError):
            continue  # a field this mapping cannot type is left out rather than failing the query
        out.append(StructField(name, dtype, True))
    return out


def column_name(field: str) -> str:
    return f"value_{field}" if field in FIXED_COLUMNS else field


def _fields_by_column(avro: "_Avro") -> dict[str, dict]:
    """Column name -> top-level field, in field order (of two fields that give one name, the first)."""
    out: dict[str, dict] = {}
    for field in avro.root.get("fields", ()):
        out.setdefault(column_name(field["name"]), field)
    return out


def extra_columns(schema: StructType) -> list[StructField]:
    """The columns of a source schema after the fixed ones."""
    return [f for f in schema.fields if f.name not in FIXED_COLUMNS]


@dataclass(frozen=True)
class ValueColumns:
    """What a read task needs to add the schema columns (planned on the driver, picklable)."""

    columns: tuple[StructField, ...]
    schemas: TopicSchemas | None  # None: the topic has no decodable schema now, columns stay null


class ValueDecoder:
    """``value`` bytes and schema version -> a tuple with one item per column."""

    def __init__(self, values: ValueColumns) -> None:
        self.schemas = values.schemas
        self.width = len(values.columns)
        self._parsed: dict[int, object] = {}
        mapped: dict[str, tuple[str, DataType, Callable]] = {}  # column -> (field, type, converter)
        if self.schemas is not None:
            avro = _Avro(json.loads(self.schemas.definitions[self.schemas.latest]))
            for name, field in _fields_by_column(avro).items():
                try:
                    dtype, _, convert = avro.column(field["type"], ())
                except (ValueError, KeyError, TypeError, AttributeError):
                    continue
                mapped[name] = (field["name"], dtype, convert)
        self.columns = []
        for column in values.columns:
            field, dtype, convert = mapped.get(column.name, (column.name, None, _unfit))
            # A user-given schema whose type differs from the registry's: the column stays null.
            self.columns.append((field, convert if dtype == column.dataType else _unfit))

    def __call__(self, value: bytes | None, version: int | None) -> tuple:
        return self.decode(value, version)[0]

    def decode(self, value: bytes | None, version: int | None) -> tuple[tuple, str | None]:
        """The columns of ``value``, and why it is not a record of the topic's schema (None: it is,
        or it is null, or the topic has no decodable schema)."""
        if value is None or self.schemas is None:
            return (None,) * self.width, None
        try:
            record = self._decode(value, version)
        except _Undecodable as exc:
            return (None,) * self.width, str(exc)
        out = []
        for name, convert in self.columns:
            item = record.get(name)
            try:
                out.append(None if item is None else convert(item))
            except Exception:  # noqa: BLE001 - any misfit nulls the column, never the query
                out.append(None)
        return tuple(out), None

    def _decode(self, value: bytes, version: int | None) -> dict:
        if self.schemas.type == "JSON":
            try:
                record = json.loads(value)
            except ValueError as exc:
                raise _Undecodable(f"not JSON: {exc}") from None
            if not isinstance(record, dict):
                raise _Undecodable(f"a JSON {type(record).__name__}, not an object")
            return record
        latest = self.schemas.latest
        written = version if version in self.schemas.definitions else latest
        reader = self._schema(latest) if written != latest else None  # resolution fills new fields' defaults
        buffer = io.BytesIO(value)
        try:
            try:
                record = fastavro.schemaless_reader(buffer, self._schema(written), reader)
            except Exception:  # noqa: BLE001 - versions that do not resolve: read as written
                if reader is None:
                    raise
                buffer.seek(0)
                record = fastavro.schemaless_reader(buffer, self._schema(written))
        except Exception as exc:  # noqa: BLE001 - whatever fastavro raises on bad bytes
            raise _Undecodable(f"not Avro of schema version {written}: {type(exc).__name__}: {exc}") from None
        if buffer.tell() != len(value):
            raise _Undecodable(f"{len(value) - buffer.tell()} bytes left after a record of schema version {written}")
        if not isinstance(record, dict):
            raise _Undecodable(f"schema version {written} does not describe a record")
        return record

    def _schema(self, version: int):
        if version not in self._parsed:
            self._parsed[version] = fastavro.parse_schema(json.loads(self.schemas.definitions[version]))
        return self._parsed[version]


@dataclass(frozen=True)
class ArrowColumns:
    """Schema columns as Arrow fields, with the decoder that fills them."""

    fields: tuple  # pyarrow fields
    decode: ValueDecoder


def arrow_columns(values: ValueColumns) -> ArrowColumns:
    from pyspark.sql.pandas.types import to_arrow_type
    import pyarrow as pa

    return ArrowColumns(tuple(pa.field(c.name, to_arrow_type(c.dataType)) for c in values.columns),
                        ValueDecoder(values))


# -- Avro types -> Spark types and value converters ------------------------------------------
class _Avro:
    """One Avro definition with its named types, mapped to Spark columns."""

    def __init__(self, root) -> None:
        if not (isinstance(root, dict) and root.get("type") == "record"):
            raise ValueError("the schema is not an Avro-style record definition")
        self.root = root
        self.names: dict[str, dict] = {}
        self._collect(root, "")

    def _collect(self, node, namespace: str) -> None:
        if isinstance(node, list):
            for branch in node:
                self._collect(branch, namespace)
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind in _NAMED and isinstance(node.get("name"), str):
                name = node["name"]
                namespace = name.rsplit(".", 1)[0] if "." in name else node.get("namespace", namespace)
                short = name.rsplit(".", 1)[-1]
                self.names[f"{namespace}.{short}" if namespace else short] = node
                self.names.setdefault(short, node)
                for field in node.get("fields", ()) if kind in ("record", "error") else ():
                    self._collect(field.get("type"), namespace)
            elif kind == "array":
                self._collect(node.get("items"), namespace)
            elif kind == "map":
                self._collect(node.get("values"), namespace)
            elif isinstance(kind, (dict, list)):
                self._collect(kind, namespace)

    def _resolve(self, node):
        while True:
            if isinstance(node, str) and node not in _PRIMITIVES:
                found = self.names.get(node) or self.names.get(node.rsplit(".", 1)[-1])
                if found is None:
                    raise ValueError(f"unknown Avro type {node!r}")
                return found
            if isinstance(node, dict) and isinstance(node.get("type"), (dict, list)):
                node = node["type"]
                continue
            if isinstance(node, dict) and node.get("type") in _PRIMITIVES and "logicalType" not in node:
                return node["type"]
            return node

    def column(self, node, active: tuple) -> tuple[DataType, bool, Callable]:
        """(Spark type, nullable, converter) of an Avro type; ``active``: records being expanded."""
        node = self._resolve(node)
        if isinstance(node, list):
            branches = [b for b in node if self._resolve(b) != "null"]
            if len(branches) == 1:
                dtype, _, convert = self.column(branches[0], active)
                return dtype, True, convert
            return StringType(), len(branches) < len(node), _json_text  # several types: JSON text
        if isinstance(node, str):
            return _PRIMITIVE_COLUMNS[node]
        kind, logical = node.get("type"), node.get("logicalType")
        if logical is not None and (kind, logical) in _LOGICAL_COLUMNS:
            return _LOGICAL_COLUMNS[(kind, logical)]
        if logical == "decimal" and kind in ("bytes", "fixed"):
            return _decimal_column(int(node.get("precision", 0)), int(node.get("scale", 0)))
        if kind in _PRIMITIVES:
            return _PRIMITIVE_COLUMNS[kind]
        if kind == "enum":
            return StringType(), False, _enum(list(node.get("symbols", ())))
        if kind == "fixed":
            return BinaryType(), False, _binary
        if kind == "array":
            item, item_null, convert = self.column(node.get("items"), active)
            return ArrayType(item, item_null), False, _array(convert, item_null)
        if kind == "map":
            item, item_null, convert = self.column(node.get("values"), active)
            return MapType(StringType(), item, item_null), False, _map(convert, item_null)
        if kind in ("record", "error"):
            if id(node) in active:
                return StringType(), False, _json_text  # Spark types cannot recurse
            fields, converters = [], []
            for f in node.get("fields", ()):
                dtype, nullable, convert = self.column(f["type"], active + (id(node),))
                fields.append(StructField(f["name"], dtype, nullable))
                converters.append((f["name"], convert, nullable))
            return StructType(fields), False, _struct(converters)
        raise ValueError(f"unsupported Avro type {node!r}")


def _unfit(v):
    raise _Unfit(v)


def _integer(bounds):
    def convert(v):
        if isinstance(v, bool) or not isinstance(v, int) or not bounds[0] <= v <= bounds[1]:
            raise _Unfit(v)
        return v
    return convert


def _exactly(kind: type):
    def convert(v):
        if not isinstance(v, kind):
            raise _Unfit(v)
        return v
    return convert


_boolean, _string = _exactly(bool), _exactly(str)


def _floating(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _Unfit(v)
    return float(v)


def _binary(v):
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8")  # Pulsar's JSON schema writes bytes fields as text
    raise _Unfit(v)


def _date(v):
    if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
        return v
    return _EPOCH_DATE + dt.timedelta(days=_integer(_INT32)(v))  # JSON: days since the epoch


def _timestamp(unit: int):
    def convert(v):
        if isinstance(v, dt.datetime):
            return v if v.tzinfo is not None else v.replace(tzinfo=dt.timezone.utc)
        return _EPOCH + dt.timedelta(microseconds=_integer(_INT64)(v) * unit)  # JSON: a count since the epoch
    return convert


def _local_timestamp(unit: int):
    aware = _timestamp(unit)

    def convert(v):
        if isinstance(v, dt.datetime) and v.tzinfo is None:
            return v
        return aware(v).astimezone(dt.timezone.utc).replace(tzinfo=None)
    return convert


def _time_of_day(unit: int, bounds):
    def convert(v):
        if isinstance(v, dt.time):
            micros = ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
            return micros // unit
        return _integer(bounds)(v)
    return convert


def _decimal_column(precision: int, scale: int) -> tuple[DataType, bool, Callable]:
    if not 0 < precision <= 38 or not 0 <= scale <= precision:
        return StringType(), False, lambda v: str(v)  # wider than Spark's decimals: as text
    quantum = decimal.Decimal(1).scaleb(-scale)

    def convert(v):
        if isinstance(v, bool) or not isinstance(v, (decimal.Decimal, int, float)):
            raise _Unfit(v)
        value = decimal.Decimal(str(v) if isinstance(v, float) else v).quantize(quantum)
        if len(value.as_tuple().digits) > precision:
            raise _Unfit(v)
        return value
    return DecimalType(precision, scale), False, convert


def _enum(symbols: list[str]):
    def convert(v):
        if isinstance(v, str) and v in symbols:
            return v
        if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < len(symbols):
            return symbols[v]  # Pulsar's JSON schema writes an enum as its ordinal
        raise _Unfit(v)
    return convert


def _json_text(v):
    if isinstance(v, str):
        return v
    return json.dumps(v, default=lambda o: o.hex() if isinstance(o, (bytes, bytearray)) else str(o))


def _checked(convert: Callable, nullable: bool) -> Callable:
    def run(v):
        if v is None:
            if nullable:
                return None
            raise _Unfit(v)
        return convert(v)
    return run


def _array(convert: Callable, nullable: bool):
    item = _checked(convert, nullable)

    def run(v):
        if not isinstance(v, list):
            raise _Unfit(v)
        return [item(x) for x in v]
    return run


def _map(convert: Callable, nullable: bool):
    item = _checked(convert, nullable)

    def run(v):
        if not isinstance(v, dict) or not all(isinstance(k, str) for k in v):
            raise _Unfit(v)
        return {k: item(x) for k, x in v.items()}
    return run


def _struct(fields: list[tuple[str, Callable, bool]]):
    checked = [(name, _checked(convert, nullable)) for name, convert, nullable in fields]

    def run(v):
        if not isinstance(v, dict):
            raise _Unfit(v)
        return tuple(convert(v.get(name)) for name, convert in checked)
    return run


_PRIMITIVE_COLUMNS: dict[str, tuple[DataType, bool, Callable]] = {
    "null": (StringType(), True, _checked(_string, True)),
    "boolean": (BooleanType(), False, _boolean),
    "int": (IntegerType(), False, _integer(_INT32)),
    "long": (LongType(), False, _integer(_INT64)),
    "float": (FloatType(), False, _floating),
    "double": (DoubleType(), False, _floating),
    "bytes": (BinaryType(), False, _binary),
    "string": (StringType(), False, _string),
}
_LOGICAL_COLUMNS: dict[tuple[str, str], tuple[DataType, bool, Callable]] = {
    ("int", "date"): (DateType(), False, _date),
    ("int", "time-millis"): (IntegerType(), False, _time_of_day(1000, _INT32)),
    ("long", "time-micros"): (LongType(), False, _time_of_day(1, _INT64)),
    ("long", "timestamp-millis"): (TimestampType(), False, _timestamp(1000)),
    ("long", "timestamp-micros"): (TimestampType(), False, _timestamp(1)),
    ("long", "local-timestamp-millis"): (TimestampNTZType(), False, _local_timestamp(1000)),
    ("long", "local-timestamp-micros"): (TimestampNTZType(), False, _local_timestamp(1)),
    ("string", "uuid"): (StringType(), False, str),  # fastavro gives a UUID
}
__all__ = ["DECODED_TYPES", "TopicSchemas", "ValueColumns", "ValueDecoder", "column_name", "columns_for",
           "extra_columns", "topic_schemas"]
