"""Schema compatibility by Avro resolution, as Pulsar's Avro validators decide it: a table of schema
pairs, each with whether the new schema reads the old one's data and the old the new one's, checked
under every strategy (BACKWARD = new reads old, FORWARD = old reads new, FULL = both)."""

from __future__ import annotations

import json

import pytest

from nereus.topics.schemas import STRATEGIES, SchemaInfo, is_compatible


def record(name: str, *fields: dict, **extra) -> dict:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def field(name: str, type_, **extra) -> dict:
    return {"name": name, "type": type_, **extra}


def enum(name: str, *symbols: str) -> dict:
    return {"type": "enum", "name": name, "symbols": list(symbols)}


def fixed(name: str, size: int) -> dict:
    return {"type": "fixed", "name": name, "size": size}


def changed(old_type, new_type, **new_extra) -> tuple[dict, dict]:
    """One field whose type changes from ``old_type`` to ``new_type`` (records named apart)."""
    return record("Old", field("f", old_type)), record("New", field("f", new_type, **new_extra))


NULLABLE = ["null", "string"]
# name -> (old schema, new schema, new reads old's data, old reads new's data)
PAIRS = {
    # A record of nullable fields and a required boolean, then the same fields with defaults, sorted.
    "example_with_defaults": (
        record("Example", field("name", NULLABLE), field("count", ["null", "int"]), field("active", "boolean"),
               field("city", NULLABLE)),
        record("ExampleRequiredDefault", field("active", "boolean", default=False),
               field("city", NULLABLE, default=None), field("count", ["null", "int"], default=None),
               field("name", NULLABLE, default=None)),
        True, True),
    # A nullable int becomes a required one: old readers take it through their union, new readers
    # cannot read old data that holds null.
    "nullable_to_required": (
        record("User1", field("name", NULLABLE), field("age", ["null", "int"])),
        record("User2", field("age", "int"), field("name", NULLABLE)),
        False, True),
    "required_to_nullable": (*changed("int", ["null", "int"], default=None), True, False),
    "only_the_record_name": (record("A", field("x", "int")), record("B", field("x", "int")), True, True),
    "field_added_with_default": (record("R", field("a", "int")),
                                 record("R", field("a", "int"), field("b", "string", default="")), True, True),
    "field_added_without_default": (record("R", field("a", "int")),
                                    record("R", field("a", "int"), field("b", "string")), False, True),
    "required_field_removed": (record("R", field("a", "int"), field("b", "string")),
                               record("R", field("a", "int")), True, False),
    "field_renamed_with_an_alias": (record("R", field("a", "int")), record("R", field("b", "int", aliases=["a"])),
                                    True, False),
    "int_to_long": (*changed("int", "long"), True, False),
    "int_to_float": (*changed("int", "float"), True, False),
    "long_to_double": (*changed("long", "double"), True, False),
    "float_to_double": (*changed("float", "double"), True, False),
    "long_to_int": (*changed("long", "int"), False, True),
    "string_to_bytes": (*changed("string", "bytes"), True, True),
    "string_to_int": (*changed("string", "int"), False, False),
    "union_reordered": (*changed(["null", "string"], ["string", "null"]), True, True),
    "union_widened": (*changed(["null", "int"], ["null", "int", "string"]), True, False),
    "union_branch_promoted": (*changed(["null", "int"], ["null", "long"]), True, False),
    "array_items_promoted": (*changed({"type": "array", "items": "int"}, {"type": "array", "items": "long"}),
                             True, False),
    "map_values_changed": (*changed({"type": "map", "values": "int"}, {"type": "map", "values": "string"}),
                           False, False),
    # Enum symbols are not compared by Pulsar's check (Avro fails, or defaults, when such a value is read).
    "enum_symbol_added": (*changed(enum("Color", "RED", "GREEN"), enum("Color", "RED", "GREEN", "BLUE")),
                          True, True),
    "enum_renamed": (*changed(enum("Color", "RED"), enum("Colour", "RED")), False, False),
    "fixed_resized": (*changed(fixed("Hash", 16), fixed("Hash", 32)), False, False),
    "fixed_renamed": (*changed(fixed("Hash", 16), fixed("Digest", 16)), False, False),
    # A record in a union is found by its structure when its name changed.
    "nested_record_renamed_in_a_union": (
        *changed(["null", record("Inner", field("x", "int"))],
                 ["null", record("Inner2", field("x", "int"), field("y", "int", default=0))]),
        True, True),
    "nested_record_field_type_changed": (
        *changed(record("Inner", field("x", "int")), record("Inner", field("x", "string"))), False, False),
}


def _expected(strategy: str, new_reads_old: bool, old_reads_new: bool) -> bool:
    mode = strategy.removesuffix("_TRANSITIVE")
    return {"ALWAYS_COMPATIBLE": True, "ALWAYS_INCOMPATIBLE": False, "BACKWARD": new_reads_old,
            "FORWARD": old_reads_new, "FULL": new_reads_old and old_reads_new}[mode]


def _compatible(strategy: str, kind: str, new: dict, *olds: dict) -> bool:
    history = [SchemaInfo(v, kind, json.dumps(old).encode()) for v, old in enumerate(olds)]
    return is_compatible(strategy, kind, json.dumps(new).encode(), history)


@pytest.mark.parametrize("kind", ["AVRO", "JSON"])
@pytest.mark.parametrize("pair", PAIRS)
def test_each_strategy_follows_avro_resolution(pair, kind):
    old, new, new_reads_old, old_reads_new = PAIRS[pair]
    answers = {strategy: _compatible(strategy, kind, new, old) for strategy in STRATEGIES}
    assert answers == {s: _expected(s, new_reads_old, old_reads_new) for s in STRATEGIES}


def test_transitive_strategies_check_every_earlier_version():
    v1 = record("V1", field("a", "int"))
    v2 = record("V2", field("a", "int"), field("b", "string", default=""))
    v3 = record("V3", field("a", "long"), field("b", "string"))  # reads v2, not v1 (no b, no default)
    assert _compatible("BACKWARD", "AVRO", v3, v1, v2)
    assert not _compatible("BACKWARD_TRANSITIVE", "AVRO", v3, v1, v2)
    assert not _compatible("FULL", "AVRO", v3, v1, v2)  # v2 cannot read v3's longs


def test_recursive_records_resolve():
    old = record("Node", field("value", "int"), field("next", ["null", "Node"], default=None))
    new = record("Node", field("value", "long"), field("next", ["null", "Node"], default=None),
                 field("label", "string", default=""))
    assert _compatible("BACKWARD", "AVRO", new, old)
    assert not _compatible("FORWARD", "AVRO", new, old)
