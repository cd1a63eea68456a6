"""`nereus compact`: the compaction job (Spark), once or every ``--interval`` seconds."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import click

#: Seconds between two checks of every built-in table by a worker that runs more often.
REPAIR_SECONDS = 60.0

@click.command()
@click.option("--metadata", default="oxia://127.0.0.1:6648", show_default=True,
              help="The cluster's metadata (Oxia protocol URL).")
@click.option("--objects", default=None, help="The cluster's object store URL. Default: file://./data/objects")
@click.option("--topic", "topics", multiple=True, help="Compact these topics only (repeatable). Default: all.")
@click.option("--target-mb", type=click.FloatRange(0.001), default=32, show_default=True,
              help="WAL input per compacted object.")
@click.option("--min-bytes", type=click.IntRange(1), default=1, show_default=True,
              help="Leave a stream's last range alone while it is smaller than this ...")
@click.option("--max-age", type=click.FloatRange(0), default=None,
              help="... unless its oldest record is older than this many seconds.")
@click.option("--master", default="local[2]", show_default=True, help="Spark master.")
@click.option("--catalog", default=None, help="SBT catalog: sqlite:///path (Iceberg SQL catalog) or "
              "http(s)://... (Iceberg REST). Default: iceberg/catalog.db beside a file:// object store.")
@click.option("--sbt/--no-sbt", default=True, show_default=True, help="Sync the topics' built-in Iceberg tables.")
@click.option("--progress/--no-progress", default=None, help="Progress bar (default: when on a terminal).")
@click.option("--interval", type=click.FloatRange(0), default=0, show_default=True,
              help="Keep running: compact every this many seconds (0: once).")
@click.option("--lock-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Run only while holding this file's lock (waiting for a previous worker to exit first).")
def compact(metadata: str, objects: str | None, topics: tuple[str, ...], target_mb: float, min_bytes: int,
            max_age: float | None, master: str, catalog: str | None, sbt: bool, progress: bool | None,
            interval: float, lock_file: Path | None) -> None:
    """Compact committed WAL slices into per-stream Parquet objects (a Spark job), then sync SBT tables."""
    import sys

    from ..meta.errors import MetadataError

    if lock_file is not None:
        from ..broker.data_lock import hold_lock_file

        def waiting(holder: str) -> None:
            logging.getLogger("nereus.compact").warning(
                "waiting for the compaction worker %s to exit (it holds %s)", holder or "before this one", lock_file)

        hold_lock_file(lock_file, on_wait=waiting)

    objects = objects or Path("./data/objects").resolve().as_uri()
    try:
        from ..lakehouse import compaction, sbt as sbt_tables
        from ..lakehouse.session import default_catalog_uri, local_session
    except ImportError as exc:
        raise click.ClickException(f"the lakehouse extra is not installed ({exc})") from None
    table_catalog = None
    if sbt:
        catalog = catalog or default_catalog_uri(objects)
        if catalog is None:
            raise click.UsageError("--catalog is needed for SBT tables when the object store is not file://")
        table_catalog = sbt_tables.store_catalog(catalog, objects)
    spark = local_session("nereus-compact", master)
    repaired_at = None
    pause = interval
    try:
        while True:
            # Every run syncs the tables of the topics it compacted; every REPAIR_SECONDS it also
            # checks every table there is or should be (catalog repair, retention's removals).
            repair_all = repaired_at is None or time.monotonic() - repaired_at >= REPAIR_SECONDS
            try:
                report = compaction.run_job(spark, metadata, objects, topics=list(topics) or None,
                                            target_bytes=int(target_mb * (1 << 20)), min_bytes=min_bytes,
                                            max_age_seconds=max_age, catalog=table_catalog,
                                            progress=sys.stderr.isatty() if progress is None else progress,
                                            repair_all=repair_all)
                if repair_all:
                    repaired_at = time.monotonic()
            except (MetadataError, OSError, ValueError) as exc:
                if not interval:
                    raise click.ClickException(str(exc)) from None
                logging.getLogger("nereus.compact").warning("compaction run failed: %s", exc)
            except Exception:  # a Spark, Py4J or catalog error: the next run may succeed
                if not interval:
                    raise
                logging.getLogger("nereus.compact").exception("compaction run failed")
            else:
                if report.tasks or not interval:
                    _report_compaction(report)
                # Quiet streams: the pause doubles up to IDLE_PAUSE_SECONDS (each run reads every
                # stream's index), and is short again as soon as a run finds work.
                pause = interval if report.tasks else min(pause * 2, max(interval, compaction.IDLE_PAUSE_SECONDS))
            if not interval:
                break
            time.sleep(pause)
    finally:
        spark.stop()


def _report_compaction(report) -> None:
    click.echo(f"compacted {report.compacted} of {report.tasks} range(s): {report.input_bytes / 1e6:.1f} MB of WAL "
               f"-> {report.output_bytes / 1e6:.1f} MB Parquet in {report.seconds:.1f} s"
               + (f", {report.conflicts} skipped (changed meanwhile)" if report.conflicts else ""))
    for table in report.tables:
        if table.added or table.removed:
            click.echo(f"table {table.table}: +{table.added} -{table.removed} data files, offsets {table.offsets}")


__all__ = ["compact"]
