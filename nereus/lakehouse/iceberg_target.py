"""An Iceberg table as a delivery target (pyiceberg, any catalog ``load_catalog`` can load).

Positions live in the snapshot summary: every snapshot this job commits carries
``nereus.offsets``, a JSON object ``{topic: {partition: [start, end]}}`` of all topics
delivered into the table (earlier ones carried forward). They are read from the current
snapshot, or from its nearest ancestor that has them when another writer (compaction,
a manual fix) committed after us.

pyiceberg rebases a commit that lost a race with another writer and retries it (table
property ``commit.retry.num-retries``, default 4). A rebased append of offsets another
job already delivered would duplicate them, so commits go through a view of the table
whose retries are 0 (the stored table is unchanged): a lost race raises instead.

Columns the rows bring (schema columns, a dead-letter table's reason) are added to the
table's schema first (``union_by_name``, a schema-only commit); earlier rows read them as null.

An upsert table (table property ``nereus.mode=upsert``) is written copy-on-write: one
transaction deletes the rows of the batch's keys and appends the batch's live rows
(the append's snapshot carries the positions).
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.expressions import And, BooleanExpression, EqualTo, In, LessThan, Or
from pyiceberg.table import Table, TableProperties

from .deliver import ARROW_SCHEMA, Position, TargetConflict, TargetError
from .iceberg_catalog import ensure_table, load_catalog

log = logging.getLogger(__name__)

SUMMARY_KEY = "nereus.offsets"
MODE_PROPERTY = "nereus.mode"


def recorded_offsets(table: Table) -> dict[str, dict[str, list[int]]]:
    """``nereus.offsets`` of the current snapshot or its nearest ancestor that has it."""
    snapshot = table.current_snapshot()
    while snapshot is not None:
        value = snapshot.summary.additional_properties.get(SUMMARY_KEY) if snapshot.summary else None
        if value is not None:
            return json.loads(value)
        parent = snapshot.parent_snapshot_id
        snapshot = table.metadata.snapshot_by_id(parent) if parent is not None else None
    return {}


def delete_filter(topic: str, starts: Mapping[int, int]) -> BooleanExpression:
    """The rows below each partition's start."""
    below = [And(EqualTo("partition", p), LessThan("offset", start)) for p, start in sorted(starts.items())]
    return And(EqualTo("topic", topic), below[0] if len(below) == 1 else Or(*below))


def key_filter(topic: str, rows: pa.Table) -> BooleanExpression:
    """The rows of the ``(partition, key)`` pairs of ``rows``."""
    per_partition = {}
    for partition, key in zip(rows["partition"].to_pylist(), rows["key"].to_pylist()):
        per_partition.setdefault(partition, set()).add(key)
    parts = [And(EqualTo("partition", p), In("key", keys)) for p, keys in sorted(per_partition.items())]
    return And(EqualTo("topic", topic), parts[0] if len(parts) == 1 else Or(*parts))


def _without_retries(table: Table) -> Table:
    """The same table, seen with ``commit.retry.num-retries`` 0 (nothing is written to the catalog)."""
    properties = {**table.metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    metadata = table.metadata.model_copy(update={"properties": properties})
    return Table(table.name(), metadata, table.metadata_location, table.io, table.catalog)


class IcebergTarget:
    """Delivers into ``identifier`` (``namespace.table``) of the catalog ``name`` (created if missing)."""

    def __init__(self, name: str, properties: Mapping[str, str], identifier: str, *, upsert: bool = False) -> None:
        namespace, _, table = identifier.rpartition(".")
        if not namespace or not table:
            raise TargetError(f"iceberg table {identifier!r} must be namespace.table")
        self.description = f"iceberg {'upsert ' if upsert else ''}table {identifier} of catalog {name}"
        mode = "upsert" if upsert else "append"
        self._identifier = identifier
        try:
            self._catalog = load_catalog(name, **properties)
            self._table, _ = ensure_table(self._catalog, identifier, ARROW_SCHEMA, {MODE_PROPERTY: mode})
        except NoSuchTableError as exc:
            raise TargetError(f"cannot create the iceberg table {identifier}: {exc}") from exc
        except (ValueError, OSError, NotImplementedError) as exc:
            raise TargetError(f"cannot use the iceberg catalog {name!r}: {exc}") from exc
        missing = set(ARROW_SCHEMA.names) - {f.name for f in self._table.schema().fields}
        if missing:
            raise TargetError(f"the iceberg table {identifier} lacks the columns {sorted(missing)}")
        stored = self._table.metadata.properties.get(MODE_PROPERTY, "append")
        if stored != mode:
            raise TargetError(f"the iceberg table {identifier} is an {stored} table, not an {mode} table")
        self._offsets: dict[str, dict[str, list[int]]] = {}

    def positions(self, topic: str, partitions: Sequence[int]) -> dict[int, Position]:
        self._table = self._catalog.load_table(self._identifier)  # the latest commit, whoever made it
        self._offsets = recorded_offsets(self._table)
        mine = self._offsets.get(topic, {})
        out = {p: Position(*mine[str(p)]) for p in partitions if str(p) in mine}
        log.debug("%s: positions %s", self.description, out)
        return out

    def _summary(self, topic: str, positions: Mapping[int, Position]) -> dict[str, str]:
        offsets = {t: dict(parts) for t, parts in self._offsets.items()}
        offsets.setdefault(topic, {}).update({str(p): [pos.start, pos.end] for p, pos in positions.items()})
        return {SUMMARY_KEY: json.dumps(offsets, sort_keys=True, separators=(",", ":"))}

    def _commit(self, topic: str, positions: Mapping[int, Position], operation) -> None:
        summary = self._summary(topic, positions)
        view = _without_retries(self._table)
        try:
            operation(view, summary)
        except CommitFailedException as exc:
            raise TargetConflict(str(exc)) from exc
        self._table = view  # holds the metadata of its own commit now
        self._offsets = json.loads(summary[SUMMARY_KEY])

    def _evolve(self, schema: pa.Schema) -> None:
        """Add the columns of ``schema`` the table lacks (a schema-only commit; files untouched)."""
        if not set(schema.names) - set(self._table.schema().column_names):
            return
        with self._table.update_schema() as update:
            update.union_by_name(schema)
        self._table = self._catalog.load_table(self._identifier)

    def append(self, topic: str, rows: pa.Table, positions: Mapping[int, Position]) -> None:
        self._evolve(rows.schema)
        self._commit(topic, positions, lambda table, summary: table.append(rows, snapshot_properties=summary))

    def upsert(self, topic: str, rows: pa.Table, positions: Mapping[int, Position]) -> None:
        if not rows.num_rows:
            return self.append(topic, rows, positions)
        self._evolve(rows.schema)
        live = rows.filter(pc.is_valid(rows["value"]))

        def replace_keys(table: Table, summary: dict[str, str]) -> None:
            with table.transaction() as tx, warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Delete operation did not match any records")
                tx.delete(key_filter(topic, rows))
                tx.append(live, snapshot_properties=summary)

        self._commit(topic, positions, replace_keys)

    def delete_below(self, topic: str, positions: Mapping[int, Position]) -> None:
        before = self._table.metadata.current_snapshot_id
        condition = delete_filter(topic, {p: pos.start for p, pos in positions.items()})
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Delete operation did not match any records")
            self._commit(topic, positions, lambda table, summary: table.delete(condition, snapshot_properties=summary))
        if self._table.metadata.current_snapshot_id == before:
            # Nothing matched and pyiceberg committed nothing: record the starts on their own.
            self.append(topic, ARROW_SCHEMA.empty_table(), positions)

    def close(self) -> None:
        self._catalog = None
