"""A Delta table as a delivery target (deltalake, i.e. delta-rs).

Positions live in the Delta log as application transactions (``txn`` / SetTransaction
actions, the protocol's mechanism for idempotent streaming writes): per partition the
app id ``nereus:{topic}:{partition}:end`` with the delivered end offset as its version,
and ``...:start`` with the retained start. They are written by the same commit as the
rows (``CommitProperties(app_transactions=...)``) and read back with
``DeltaTable.transaction_version``; log replay keeps the latest version of each app id,
also across checkpoints.

Commits are made with ``max_commit_retries=0``: a commit whose version another writer
took fails instead of being rebased, so two jobs cannot both append the same offsets.

Columns the rows bring (schema columns, a dead-letter table's reason) are added to the
table's schema by the same commit (schema merge); earlier rows read them as null.

An upsert table (table configuration ``nereus.mode=upsert``) is written by MERGE on
``(topic, partition, key)``: matched rows are replaced or, for a tombstone, deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError

from .deliver import ARROW_SCHEMA, Position, TargetConflict, TargetError

log = logging.getLogger(__name__)


def app_id(topic: str, partition: int, bound: str) -> str:
    """The Delta application id recording ``bound`` (``start`` or ``end``) of one partition."""
    return f"nereus:{topic}:{partition}:{bound}"


MODE_KEY = "nereus.mode"
UPSERT_PREDICATE = 't.topic = s.topic AND t."partition" = s."partition" AND t.key = s.key'


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def delete_predicate(topic: str, starts: Mapping[int, int]) -> str:
    """SQL predicate of the rows below each partition's start (names quoted: ``partition`` is a keyword)."""
    below = " OR ".join(f'("partition" = {p} AND "offset" < {start})' for p, start in sorted(starts.items()))
    return f'"topic" = {_sql_string(topic)} AND ({below})'


class DeltaTarget:
    """Delivers into the Delta table at ``uri`` (created with ``ARROW_SCHEMA`` if missing)."""

    def __init__(self, uri: str, storage_options: Mapping[str, str] | None = None, *, upsert: bool = False) -> None:
        self.description = f"delta {'upsert ' if upsert else ''}table {uri}"
        self._uri = uri
        self._options = dict(storage_options or {})
        mode = "upsert" if upsert else "append"
        try:
            self._table = DeltaTable.create(uri, ARROW_SCHEMA, mode="ignore", storage_options=self._options or None,
                                            configuration={MODE_KEY: mode}, raise_if_key_not_exists=False)
        except (DeltaError, OSError, ValueError) as exc:
            raise TargetError(f"cannot open or create the delta table {uri}: {exc}") from exc
        missing = set(ARROW_SCHEMA.names) - {f.name for f in self._table.schema().fields}
        if missing:
            raise TargetError(f"the delta table {uri} lacks the columns {sorted(missing)}: not a delivered table")
        stored = self._table.metadata().configuration.get(MODE_KEY) or "append"
        if stored != mode:
            raise TargetError(f"the delta table {uri} is an {stored} table, not an {mode} table")

    def positions(self, topic: str, partitions: Sequence[int]) -> dict[int, Position]:
        self._table.update_incremental()  # the latest commit, whoever made it
        out: dict[int, Position] = {}
        for p in partitions:
            end = self._table.transaction_version(app_id(topic, p, "end"))
            if end is not None:
                out[p] = Position(self._table.transaction_version(app_id(topic, p, "start")) or 0, end)
        log.debug("%s version %d: positions %s", self.description, self._table.version(), out)
        return out

    def _commit_properties(self, topic: str, positions: Mapping[int, Position]) -> CommitProperties:
        txns = []
        for p, pos in positions.items():
            txns += [Transaction(app_id(topic, p, "start"), pos.start), Transaction(app_id(topic, p, "end"), pos.end)]
        return CommitProperties(app_transactions=txns, max_commit_retries=0)

    def append(self, topic: str, rows: pa.Table, positions: Mapping[int, Position]) -> None:
        try:
            write_deltalake(self._table, rows, mode="append", schema_mode="merge",
                            commit_properties=self._commit_properties(topic, positions))
        except CommitFailedError as exc:
            self._table.update_incremental()
            raise TargetConflict(str(exc)) from exc

    def upsert(self, topic: str, rows: pa.Table, positions: Mapping[int, Position]) -> None:
        if not rows.num_rows:
            return self.append(topic, rows, positions)
        version = self._table.version()
        try:
            merger = self._table.merge(rows, UPSERT_PREDICATE, source_alias="s", target_alias="t", merge_schema=True,
                                       commit_properties=self._commit_properties(topic, positions))
            (merger.when_matched_delete(predicate="s.value IS NULL").when_matched_update_all()
             .when_not_matched_insert_all(predicate="s.value IS NOT NULL").execute())
        except CommitFailedError as exc:
            self._table.update_incremental()
            raise TargetConflict(str(exc)) from exc
        if self._table.version() == version:  # only tombstones of absent keys: nothing was committed
            self.append(topic, ARROW_SCHEMA.empty_table(), positions)

    def delete_below(self, topic: str, positions: Mapping[int, Position]) -> None:
        version = self._table.version()
        try:
            self._table.delete(delete_predicate(topic, {p: pos.start for p, pos in positions.items()}),
                               commit_properties=self._commit_properties(topic, positions))
        except CommitFailedError as exc:
            self._table.update_incremental()
            raise TargetConflict(str(exc)) from exc
        if self._table.version() == version:
            # Nothing matched and delta-rs committed nothing: record the starts on their own.
            self.append(topic, ARROW_SCHEMA.empty_table(), positions)

    def close(self) -> None:
        pass  # delta-rs holds no open resources between calls
