"""``nereus lakehouse``: jobs between topics and lakehouse tables.

    nereus lakehouse deliver --metadata oxia://127.0.0.1:6648 --objects file:///var/lib/nereus/objects \\
        --topic orders --delta /lake/orders --once
    nereus lakehouse deliver ... --topic orders --hudi s3://lake/orders --storage-option AWS_REGION=eu-west-1
    nereus lakehouse deliver ... --topic orders --iceberg-catalog lake \\
        --catalog-property type=sql --catalog-property uri=sqlite:////lake/catalog.db \\
        --catalog-property warehouse=file:///lake/warehouse --table streams.orders --interval 30

The group is attached to the main command line by ``main.add_command(lakehouse)``;
``python -m nereus.lakehouse.cli`` runs it on its own.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable

import click

from .deliver import DEFAULT_BATCH_RECORDS, Delivery, Stats, Target, TargetConflict, TargetError, TopicNotFound
from .wal_access import DEFAULT_UPLOAD_WAIT, WalAccess

def _pairs(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r} is not key=value", ctx=ctx, param=param)
        out[key.strip()] = value
    return out


@click.group()
def lakehouse() -> None:
    """Lakehouse jobs: deliver topics into Delta, Hudi and Iceberg tables."""


def _target_factory(delta: str | None, hudi: str | None, storage_options: dict[str, str], catalog: str | None,
                    catalog_properties: dict[str, str], table: str | None, upsert: bool,
                    dead_letter: str | None) -> Callable[[bool], Target]:
    """Checks the target options now; the factory opens (or creates) the table, or with True its
    dead-letter table (``--dead-letter``, default: the table's location or name + ``_dead_letter``)."""
    if sum(target is not None for target in (delta, hudi, catalog)) != 1:
        raise click.UsageError("give exactly one target: --delta PATH_OR_URI, --hudi PATH_OR_URI "
                               "or --iceberg-catalog NAME")
    if delta is not None or hudi is not None:
        if catalog_properties or table:
            raise click.UsageError("--catalog-property and --table go with --iceberg-catalog, "
                                   "not --delta or --hudi")
        location = delta if delta is not None else hudi

        def table_target(dead: bool) -> Target:
            where = (dead_letter or location.rstrip("/") + "_dead_letter") if dead else location
            if delta is not None:
                from .delta_target import DeltaTarget

                return DeltaTarget(where, storage_options, upsert=upsert and not dead)
            from .hudi_target import HudiTarget

            return HudiTarget(where, storage_options, upsert=upsert and not dead)

        return table_target
    if storage_options:
        raise click.UsageError("--storage-option goes with --delta or --hudi; give Iceberg storage as "
                               "--catalog-property")
    if not table:
        raise click.UsageError("--iceberg-catalog needs --table namespace.table")
    for given, hint in ((table, "--table"), (dead_letter, "--dead-letter")):
        if given is not None and not all(given.rpartition(".")[::2]):
            raise click.BadParameter(f"{given!r} must be namespace.table", param_hint=hint)

    def iceberg_target(dead: bool) -> Target:
        from .iceberg_target import IcebergTarget

        where = (dead_letter or table + "_dead_letter") if dead else table
        return IcebergTarget(catalog, catalog_properties, where, upsert=upsert and not dead)

    return iceberg_target


@lakehouse.command()
@click.option("--metadata", required=True, help="The cluster's metadata, e.g. oxia://127.0.0.1:6648.")
@click.option("--objects", required=True, help="The cluster's object store URL, e.g. file:///var/lib/nereus/objects.")
@click.option("--topic", required=True, help="Topic to deliver (short names are in public/default).")
@click.option("--delta", metavar="PATH_OR_URI", help="Deliver into this Delta table (created if missing).")
@click.option("--hudi", metavar="PATH_OR_URI",
              help="Deliver into this Hudi copy-on-write table (created if missing).")
@click.option("--storage-option", "storage_options", multiple=True, callback=_pairs, metavar="KEY=VALUE",
              help="Storage option of the Delta or Hudi table (repeatable), e.g. AWS_REGION=eu-west-1.")
@click.option("--iceberg-catalog", "catalog", metavar="NAME", help="Deliver into a table of this Iceberg catalog.")
@click.option("--catalog-property", "catalog_properties", multiple=True, callback=_pairs, metavar="KEY=VALUE",
              help="Property of the Iceberg catalog (repeatable), e.g. type=sql, uri=sqlite:///c.db, warehouse=...")
@click.option("--table", metavar="NAMESPACE.TABLE", help="The Iceberg table (created if missing).")
@click.option("--batch-records", type=click.IntRange(min=1), default=DEFAULT_BATCH_RECORDS, show_default=True,
              help="Records per table commit.")
@click.option("--upsert", is_flag=True, help="An upsert table (for key-compacted topics): one row per partition "
              "and key, its latest record; a record without a value deletes its key's row.")
@click.option("--schema-columns", is_flag=True, help="Add the fields of the topic's AVRO/JSON schema as columns "
              "(new fields add columns); records that do not decode go to the dead-letter table.")
@click.option("--dead-letter", metavar="PATH_OR_URI|NAMESPACE.TABLE", help="The dead-letter table, of the same "
              "kind as the target. Default: the target's location or name + _dead_letter.")
@click.option("--once", is_flag=True, help="Deliver up to the current tail and exit (the default).")
@click.option("--interval", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Keep delivering, a round every SECONDS, until interrupted.")
@click.option("--progress/--no-progress", default=True, show_default=True, help="Show a progress bar.")
@click.option("--wal-auth-params", metavar="TOKEN", help="Read records acknowledged on brokers' WAL replicas and "
              "not uploaded yet with this token (token:<jwt>, file:///path or the token itself), as the brokers' "
              "brokerClientAuthenticationParameters.")
@click.option("--wal-tls-cert-file", metavar="PATH", help="Client certificate for WAL replicas served over TLS.")
@click.option("--wal-tls-key-file", metavar="PATH", help="Its private key.")
@click.option("--wal-tls-trust-certs-file", metavar="PATH", help="CA certificates the WAL replicas are checked "
              "against.")
@click.option("--wal-upload-wait", type=click.FloatRange(min=0), default=DEFAULT_UPLOAD_WAIT, show_default=True,
              metavar="SECONDS", help="How long to wait for records that cannot be read from a WAL replica "
              "(no or refused credentials, broker down) to reach the object store.")
def deliver(metadata: str, objects: str, topic: str, delta: str | None, hudi: str | None,
            storage_options: dict[str, str],
            catalog: str | None, catalog_properties: dict[str, str], table: str | None, batch_records: int,
            upsert: bool, schema_columns: bool, dead_letter: str | None, once: bool, interval: float | None,
            progress: bool, wal_auth_params: str | None, wal_tls_cert_file: str | None,
            wal_tls_key_file: str | None, wal_tls_trust_certs_file: str | None, wal_upload_wait: float) -> None:
    """Deliver a topic's committed records into a Delta, Hudi or Iceberg table, exactly once.

    Each commit records the delivered offset of every partition it covers, so a job that
    is killed at any point resumes where the table says, without duplicates or gaps. Rows
    below a partition's retained start (trim, retention) are deleted from the table.
    A topic that does not exist is an error, and no table is created for it.
    """
    if once and interval is not None:
        raise click.UsageError("--once and --interval exclude each other")
    from ..ledger.naming import InvalidTopicName
    from ..meta import InvalidRequest, MetadataError
    from ..objstore import ObjectStoreError, UnsupportedStoreUrl
    from ..storage.errors import StorageError

    if dead_letter is not None and not schema_columns:
        raise click.UsageError("--dead-letter goes with --schema-columns")
    access = _wal_access(wal_auth_params, wal_tls_cert_file, wal_tls_key_file, wal_tls_trust_certs_file,
                         wal_upload_wait)
    make_target = _target_factory(delta, hudi, storage_options, catalog, catalog_properties, table, upsert,
                                  dead_letter)
    try:
        stats, description = asyncio.run(_deliver(metadata, objects, topic, make_target, batch_records, interval,
                                                   progress, upsert, schema_columns, access))
    except InvalidRequest as exc:
        raise click.BadParameter(str(exc), param_hint="--metadata") from None
    except InvalidTopicName as exc:
        raise click.BadParameter(str(exc), param_hint="--topic") from None
    except UnsupportedStoreUrl as exc:
        raise click.BadParameter(str(exc), param_hint="--objects") from None
    except (TargetError, TopicNotFound) as exc:
        raise click.ClickException(str(exc)) from None
    except TargetConflict as exc:
        raise click.ClickException(f"other writers keep committing to the table: {exc}") from None
    except (MetadataError, ObjectStoreError, StorageError) as exc:
        raise click.ClickException(f"cannot read the topic: {exc}") from None
    except KeyboardInterrupt:
        raise click.Abort() from None  # the table holds every commit that landed; a re-run resumes there
    click.echo(f"delivered {stats.records} records ({stats.offsets} offsets) of {topic} to {description} "
               f"in {stats.commits} commits, {stats.deletes} retention deletes"
               + (f", {stats.keyless} records without a key left out" if stats.keyless else "")
               + (f", {stats.dead} records to the dead-letter table" if stats.dead else ""), err=True)


#: The Spark source's option names (in ``WalAccess.check``'s messages) and this command's.
_WAL_FLAGS = {"walAuthParams": "--wal-auth-params", "walTlsCertFile": "--wal-tls-cert-file",
              "walTlsKeyFile": "--wal-tls-key-file", "walTlsTrustCertsFile": "--wal-tls-trust-certs-file"}


def _wal_access(auth_params: str | None, cert: str | None, key: str | None, trust: str | None,
                upload_wait: float) -> WalAccess:
    access = WalAccess(auth_params, trust, cert, key, upload_wait)
    try:
        access.check()
    except ValueError as exc:
        message = str(exc)
        for option, flag in _WAL_FLAGS.items():
            message = message.replace(option, flag)
        raise click.BadParameter(message, param_hint="--wal-auth-params/--wal-tls-*") from None
    return access


async def _deliver(metadata: str, objects: str, topic: str, make_target: Callable[[bool], Target],
                   batch_records: int, interval: float | None, progress: bool, upsert: bool,
                   schema_columns: bool, access: WalAccess) -> tuple[Stats, str]:
    from tqdm import tqdm

    from ..meta import connect
    from ..objstore import open_object_store
    from .rows import topic_ranges

    # URLs and the topic first: a typo must not leave a freshly created table behind.
    store = open_object_store(objects)
    try:
        meta = connect(metadata)
    except BaseException:
        await store.close()
        raise
    try:
        await topic_ranges(meta, topic, must_exist=True)
        target = make_target(False)
        dead_letter = make_target(True) if schema_columns else None
    except BaseException:
        await meta.close()
        await store.close()
        raise
    bar = tqdm(desc=f"delivering {topic}", unit="rec", unit_scale=True, disable=not progress, total=0)

    def planned(offsets: int) -> None:
        bar.total = bar.n + offsets  # a new round: what is left now
        bar.refresh()

    job = Delivery(meta, store, topic, target, batch_records=batch_records, upsert=upsert,
                   schema_columns=schema_columns, dead_letter=dead_letter, on_plan=planned,
                   on_progress=lambda offsets, records: bar.update(offsets), wal_access=access)
    try:
        if interval is None:
            return await job.deliver_once(), target.description
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)  # stop after the commit in progress
        return await job.run(interval, stop), target.description
    finally:
        bar.close()
        job.close()
        target.close()
        if dead_letter is not None:
            dead_letter.close()
        await meta.close()
        await store.close()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    lakehouse()


@lakehouse.command()
@click.option("--metadata", required=True, help="The cluster's metadata, e.g. oxia://127.0.0.1:6648.")
@click.option("--objects", required=True, help="The cluster's object store URL, e.g. file:///var/lib/nereus/objects.")
@click.option("--catalog", default=None, help="SBT catalog: sqlite:///path (Iceberg SQL catalog) or "
              "http(s)://... (Iceberg REST). Default: iceberg/catalog.db beside a file:// object store.")
@click.option("--topic", "topics", multiple=True, help="Check these topics' tables only (repeatable). "
              "Default: every table the catalog has or should have.")
@click.option("--dry-run", is_flag=True, help="Report what differs; change nothing.")
def repair(metadata: str, objects: str, catalog: str | None, topics: tuple[str, ...], dry_run: bool) -> None:
    """Bring the topics' built-in Iceberg tables back to the metadata plane's truth.

    A table behind the offset index (a lost commit, a catalog restored from a backup, a
    table dropped by hand) or ahead of it (it lists objects retention or compaction
    removed) is re-synced: it then lists exactly the compacted objects the index refers
    to, each once, so no row is duplicated. Tables of deleted topics are dropped.
    """
    from ..ledger.naming import InvalidTopicName
    from ..meta import InvalidRequest, MetadataError
    from ..objstore import ObjectStoreError
    from .session import default_catalog_uri

    catalog = catalog or default_catalog_uri(objects)
    if catalog is None:
        raise click.UsageError("--catalog is needed when the object store is not file://")
    try:
        report = asyncio.run(_repair(metadata, objects, catalog, list(topics) or None, dry_run))
    except InvalidRequest as exc:
        raise click.BadParameter(str(exc), param_hint="--metadata") from None
    except InvalidTopicName as exc:
        raise click.BadParameter(str(exc), param_hint="--topic") from None
    except (MetadataError, ObjectStoreError, OSError) as exc:
        raise click.ClickException(f"cannot repair: {exc}") from None
    from .repair import describe

    would = "would be " if dry_run else ""
    for synced in report.repaired:
        click.echo(f"{synced.table}: {describe(synced)}: {would}+{synced.added} -{synced.removed} data files, "
                   f"offsets {synced.offsets}")
    for topic in report.dropped:
        click.echo(f"{topic}: the topic no longer exists: its table {would}dropped")
    if report.released_pins:
        click.echo(f"{report.released_pins} pins of tables of deleted topics {would}released")
    click.echo(f"checked {report.checked} tables: {report.in_sync} in sync, {len(report.repaired)} "
               f"{would}repaired, {len(report.dropped)} {would}dropped", err=True)


async def _repair(metadata: str, objects: str, catalog_uri: str, topics: list[str] | None, dry_run: bool):
    from ..meta import connect
    from .repair import repair as run_repair
    from .sbt import store_catalog

    meta = connect(metadata)
    try:
        catalog = await asyncio.to_thread(store_catalog, catalog_uri, objects)
        return await run_repair(meta, catalog, objects, topics=topics, dry_run=dry_run)
    finally:
        await meta.close()
