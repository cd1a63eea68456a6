"""The Iceberg REST catalog's wire shapes (``broker/iceberg_rest/protocol.py``), without a broker."""

from __future__ import annotations

import json

import pytest

from nereus.broker.iceberg_rest import protocol


def test_namespaces_are_split_on_the_unit_separator():
    assert protocol.parse_namespace(None) == ()
    assert protocol.parse_namespace("") == ()  # an empty parent is no parent
    assert protocol.parse_namespace("public") == ("public",)
    assert protocol.parse_namespace("public\x1fdefault") == ("public", "default")
    with pytest.raises(protocol.IcebergError) as refused:
        protocol.parse_namespace("public\x1f")
    assert refused.value.status == 400


def test_errors_are_the_specs_error_model():
    error = protocol.no_such_table(("public", "default"), "t")
    assert protocol.error_body(error.status, error.kind, error.message) == {
        "error": {"message": "Table does not exist: public.default.t", "type": "NoSuchTableException", "code": 404}}
    assert protocol.no_such_namespace(("x",)).kind == "NoSuchNamespaceException"


def test_config_announces_reads_only_without_prefix():
    config = protocol.config()
    assert config["defaults"] == {} and config["overrides"] == {}
    assert all(e.split(" ", 1)[0] in ("GET", "HEAD") and e.split(" ", 1)[1].startswith("/v1/{prefix}/")
               for e in config["endpoints"])


def test_load_table_keeps_the_metadata_and_filters_snapshots_to_refs_on_request():
    metadata = {"format-version": 2, "refs": {"main": {"snapshot-id": 2, "type": "branch"}},
                "snapshots": [{"snapshot-id": 1}, {"snapshot-id": 2}]}
    loaded = protocol.load_table("file:///m/00001.metadata.json", json.dumps(metadata), None)
    assert loaded == {"metadata-location": "file:///m/00001.metadata.json", "metadata": metadata, "config": {}}
    assert protocol.load_table("l", json.dumps(metadata), "all")["metadata"] == metadata
    assert protocol.load_table("l", json.dumps(metadata), "refs")["metadata"]["snapshots"] == [{"snapshot-id": 2}]
    with pytest.raises(protocol.IcebergError):
        protocol.load_table("l", json.dumps(metadata), "some")


def test_the_etag_follows_the_metadata_file():
    assert protocol.etag("a") == protocol.etag("a") != protocol.etag("b")
    assert protocol.etag("a").startswith('"') and protocol.etag("a").endswith('"')
