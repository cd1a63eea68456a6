"""Two jobs opening the same new SQL catalog at once: the loser of the table-creation race opens it again."""

from __future__ import annotations

import threading

import pyiceberg.catalog
import pytest

from nereus.lakehouse.iceberg_catalog import load_catalog


def test_a_catalog_whose_tables_another_job_just_created_opens(monkeypatch, tmp_path):
    real, calls = pyiceberg.catalog.load_catalog, []

    def racing(name, **properties):
        calls.append(name)
        if len(calls) == 1:  # what SQLite answers the job that lost the race
            raise RuntimeError("(sqlite3.OperationalError) table iceberg_tables already exists")
        return real(name, **properties)

    monkeypatch.setattr(pyiceberg.catalog, "load_catalog", racing)
    catalog = load_catalog("lake", type="sql", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=tmp_path.as_uri())
    assert catalog.list_namespaces() == [] and len(calls) == 2


def test_other_failures_are_not_retried(monkeypatch):
    calls = []

    def broken(name, **properties):
        calls.append(name)
        raise ValueError("no such catalog type")

    monkeypatch.setattr(pyiceberg.catalog, "load_catalog", broken)
    with pytest.raises(ValueError):
        load_catalog("lake", type="nope")
    assert len(calls) == 1


def test_jobs_opening_one_new_catalog_at_once_all_succeed(tmp_path):
    uri, errors = f"sqlite:///{tmp_path}/catalog.db", []

    def open_it() -> None:
        try:
            load_catalog("lake", type="sql", uri=uri, warehouse=tmp_path.as_uri()).list_namespaces()
        except Exception as exc:  # noqa: BLE001 (collected for the assertion)
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
