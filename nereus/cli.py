"""The `nereus` command line."""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import sys
import time
from pathlib import Path

import click

from .broker.options import BROKER, STANDALONE, broker_fields, click_options

# Nereus processes start children with fork+exec only (the compaction worker, child
# brokers); gRPC's fork handlers would just print a line at each start.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

def _interrupt(_signum, _frame) -> None:
    raise KeyboardInterrupt


def _run(coro) -> None:
    # Until the server's loop installs its own stop handlers, SIGTERM stops like a Ctrl-C (no traceback).
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        import uvloop
    except ImportError:  # uvloop is pinned, but keep the CLI usable where it cannot build
        asyncio.run(coro)
    else:
        uvloop.run(coro)


LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)


def _set_log_level(_ctx, _param, value: str | None) -> None:
    if value is not None:
        logging.getLogger().setLevel(value.upper())


class _Commands(click.Group):
    """The command groups that pull in heavy modules load only when asked for.

    ``nereus lakehouse`` imports the pipeline (pyarrow, the Kafka codec): a second of
    start-up that ``nereus standalone`` or ``nereus admin`` must not pay.
    """

    lazy = {"lakehouse": ("nereus.lakehouse.cli", "lakehouse", "the lakehouse extra")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, name: str):
        if name not in self.lazy:
            return _with_log_level(super().get_command(ctx, name))
        module, attribute, needs = self.lazy[name]
        try:
            return _with_log_level(getattr(importlib.import_module(module), attribute))
        except ImportError as exc:
            raise click.ClickException(f"{needs} is not installed ({exc})") from None


def _with_log_level(command):
    """``command`` (each command of a group) taking ``--log-level`` after its name too."""
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            _with_log_level(sub)
    elif command is not None and not any(p.name == "sub_log_level" for p in command.params):
        command.params.append(click.Option(
            ["--log-level", "sub_log_level"], default=None, type=LOG_LEVELS, expose_value=False,
            callback=_set_log_level, help="Overrides the log level given before the command."))
    return command


@click.group(cls=_Commands)
@click.version_option(package_name="nereus", prog_name="nereus")
@click.option("--log-level", default="INFO", show_default=True, type=LOG_LEVELS)
@click.option("--lifeline-stdin", is_flag=True, hidden=True,
              help="Stop when standard input (a pipe from the parent process) closes: the parent died.")
def main(log_level: str, lifeline_stdin: bool) -> None:
    """Nereus: a Pulsar-native, Kafka-compatible streaming engine on object storage."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if lifeline_stdin:
        from .lifeline import watch_parent

        watch_parent(sys.stdin.fileno())


def _log_level_option(command):
    """``--log-level`` after the subcommand too (``nereus standalone --log-level DEBUG``)."""
    return click.option("--log-level", "sub_log_level", default=None, type=LOG_LEVELS, expose_value=False,
                        callback=_set_log_level, help="Overrides the log level given before the command.")(command)


def _apply_config(command: str, kwargs: dict) -> None:
    """Fill the options the command line did not set from ``--config``'s file (flags win)."""
    from click.core import ParameterSource

    from .broker.config_file import ConfigError, read_config, suggest

    path = kwargs.pop("config_file")
    if path is None:
        return
    ctx = click.get_current_context()
    try:
        resolved = read_config(str(path), command)
    except ConfigError as exc:
        raise click.ClickException(f"{path}: {exc}") from None
    params = {param.name: param for param in ctx.command.params}
    for name, value in resolved.values.items():
        if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            continue
        param = params[name]
        try:  # the option's own checks (ranges ...), so a file is held to what a flag is
            kwargs[name] = None if value is None else param.type.convert(value, param, ctx)
        except click.BadParameter as exc:
            key, text = resolved.sources[name]
            raise click.ClickException(f"{path}: invalid value {text!r} for {key}: {exc.message}") from None
    log = logging.getLogger("nereus.config")
    if resolved.ignored:
        log.info("%s: %d key(s) ignored, unknown to Nereus or without an equivalent here: %s", path,
                 len(resolved.ignored), ", ".join(resolved.ignored))
    if resolved.unknown:
        log.warning("%s: unknown key(s) ignored: %s", path,
                    ", ".join(f"{name} (did you mean {suggest(name)}?)" for name in resolved.unknown))
    for note in resolved.notes:
        log.warning("%s: %s", path, note)


def _advertised_listeners(kwargs: dict) -> tuple:
    from .broker.listeners import ListenerError, parse_bind_addresses, parse_listeners

    text, internal, binds = kwargs["advertised_listeners"], kwargs["internal_listener_name"], kwargs["bind_addresses"]
    if not text:
        if internal or binds:
            raise click.UsageError("--internal-listener-name and --bind-addresses need --advertised-listeners")
        return (), None, ()
    if kwargs["advertised_address"]:
        raise click.UsageError("--advertised-address and --advertised-listeners cannot be used together "
                               "(advertisedAddress and advertisedListeners)")
    try:
        listeners, internal = parse_listeners(text, internal)
    except ListenerError as exc:
        raise click.UsageError(f"--advertised-listeners: {exc}") from None
    try:
        return listeners, internal, parse_bind_addresses(binds or "", listeners)
    except ListenerError as exc:
        raise click.UsageError(f"--bind-addresses: {exc}") from None


def _tls_of(tls, kwargs: dict):
    """``tls``, its files read now when a TLS listener needs them: a wrong path is one line, before anything starts."""
    from .tls import TlsConfigError

    if any(kwargs[name] is not None for name in ("pulsar_tls_port", "https_port", "kafka_ssl_port",
                                                 "kafka_sasl_ssl_port")):
        try:
            tls.server_context()
        except TlsConfigError as exc:
            raise click.ClickException(f"cannot start: {exc}") from None
    return tls


def _sasl_settings(kwargs: dict):
    """The Kafka SASL listeners' settings (None without a SASL listener)."""
    from .auth import AuthConfigError
    from .auth.tokens import TokenValidator
    from .kafka.server.security.sasl import SaslSettings, parse_mechanisms

    if kwargs["kafka_sasl_port"] is None and kwargs["kafka_sasl_ssl_port"] is None:
        return None
    try:
        mechanisms = parse_mechanisms(kwargs["sasl_mechanisms"])
    except ValueError as exc:
        raise click.UsageError(f"--sasl-mechanisms: {exc}") from None
    secret, public = kwargs["token_secret_key"], kwargs["token_public_key"]
    try:
        tokens = TokenValidator.from_settings(secret_key=secret, public_key=None if secret else public,
                                              role_claim=kwargs["token_auth_claim"]) if secret or public else None
        return SaslSettings(mechanisms, tokens)
    except (AuthConfigError, ValueError) as exc:
        raise click.ClickException(f"cannot start: {exc}") from None


def _options_of(kwargs: dict):
    """The broker's options: each option's field (nereus.broker.options), then the settings made of several."""
    from .auth import AuthSettings
    from .broker.node import BrokerOptions
    from .tls import TlsOptions

    listeners, internal, binds = _advertised_listeners(kwargs)
    if not kwargs["kafka_plaintext"] and all(kwargs[name] is None for name in (
            "kafka_ssl_port", "kafka_sasl_port", "kafka_sasl_ssl_port")):
        raise click.UsageError("--no-kafka-plaintext (kafkaListeners without PLAINTEXT://) needs another Kafka "
                               "listener: --kafka-ssl-port, --kafka-sasl-port or --kafka-sasl-ssl-port")
    limit = kwargs["max_num_partitions_per_partitioned_topic"]
    if limit and kwargs["default_partitions"] > limit:
        raise click.UsageError(f"--default-partitions (defaultNumPartitions) {kwargs['default_partitions']} is above "
                               f"--max-num-partitions-per-partitioned-topic (maxNumPartitionsPerPartitionedTopic) "
                               f"{limit}: auto-created topics could not be created")
    if kwargs["consumer_group_heartbeat_interval"] >= kwargs["consumer_group_session_timeout"]:
        raise click.UsageError("--consumer-group-heartbeat-interval (group.consumer.heartbeat.interval.ms) must be "
                               "below --consumer-group-session-timeout (group.consumer.session.timeout.ms)")
    if kwargs["wal_profile"] == "replicated" and not (
            kwargs["wal_ensemble"] >= kwargs["wal_write_quorum"] >= kwargs["wal_ack_quorum"]):
        raise click.UsageError("the replicated WAL profile needs --wal-ensemble (managedLedgerDefaultEnsembleSize) >= "
                               "--wal-write-quorum (managedLedgerDefaultWriteQuorum) >= --wal-ack-quorum "
                               "(managedLedgerDefaultAckQuorum)")
    if kwargs["wal_profile"] == "local" and "metadata" in kwargs and kwargs["wal_dir"] is None:
        raise click.UsageError("the local WAL profile needs --wal-dir (walDir): the broker's WAL replica")
    fields = broker_fields(kwargs)
    fields.update(authentication=_auth_settings(AuthSettings(**fields["authentication"])),
                  tls=_tls_of(TlsOptions(**fields["tls"]), kwargs), sasl=_sasl_settings(kwargs),
                  kafka_port=kwargs["kafka_port"] if kwargs["kafka_plaintext"] else None,
                  advertised_listeners=listeners, internal_listener=internal, bind_addresses=binds)
    return BrokerOptions(**fields)


def _auth_settings(settings):
    """``settings`` (authentication), checked now (keys and htpasswd readable) so a mistake stops start-up."""
    from .auth import AuthConfigError, Authenticator

    if settings.authorization_enabled and not settings.enabled:
        raise click.UsageError("--authorization (authorizationEnabled) needs --authentication (authenticationEnabled)")
    if settings.enabled:
        try:
            Authenticator(settings)
        except AuthConfigError as exc:
            raise click.ClickException(f"cannot start: {exc}") from None
    return settings


def _metadata_trust(url: str, trust_file: str | None) -> str:
    """An ``oxia+tls://`` URL naming no CA trusts the broker's own (tlsTrustCertsFilePath), as Pulsar's
    broker client does."""
    if not trust_file or not url.startswith("oxia+tls://") or "trust=" in url.partition("?")[2]:
        return url
    from urllib.parse import quote

    return f"{url}{'&' if '?' in url else '?'}trust={quote(str(Path(trust_file).resolve()))}"


#: The flag and the configuration key that set each listener's port.
LISTENER_SETTINGS = {"http": "--http-port (webServicePort)", "pulsar": "--pulsar-port (brokerServicePort)",
                     "bind-address": "--bind-addresses (bindAddresses)",
                     "kafka": "--kafka-port (kafkaListeners)", "oxia": "--oxia-port (oxiaPort)",
                     "pulsar-tls": "--pulsar-tls-port (brokerServicePortTls)",
                     "https": "--https-port (webServicePortTls)", "kafka-ssl": "--kafka-ssl-port (kafkaListeners)"}


def _check_object_store(url: str, timeout: float) -> None:
    """Refuse, before start-up, a malformed object-store URL, a local directory this process cannot
    write, or an S3 bucket that does not take a conditional write within ``timeout`` seconds."""
    import re
    import tempfile
    from urllib.parse import unquote, urlsplit

    from .objstore import UnsupportedStoreUrl, open_object_store

    if "://" not in url and re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", url):
        raise click.ClickException(f"malformed object store URL {url!r} (expected scheme://...)")
    try:
        store = open_object_store(url)  # parses only: no I/O until first use
    except UnsupportedStoreUrl as exc:
        raise click.ClickException(str(exc)) from None
    if "://" in url and urlsplit(url).scheme.lower() == "s3":
        _probe_s3(url, store, timeout)
    if "://" in url and urlsplit(url).scheme.lower() != "file":
        return
    directory = Path(unquote(urlsplit(url).path) if "://" in url else url).resolve()
    try:  # the store creates it on first use anyway; a write now fails here rather than at the first produce
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as exc:
        raise click.ClickException(f"object store directory {directory} is not writable: "
                                   f"{exc.strerror or exc}") from None


def _probe_s3(url: str, store, timeout: float) -> None:
    """Write and delete a probe object, so a wrong bucket, endpoint or credentials stop start-up here
    rather than failing the first produce (the probe also checks conditional puts, which storage needs)."""
    from .objstore import ObjectStoreError, open_object_store
    from .tasks import wait_for

    async def probe() -> bool:
        # The client itself gives up after ``timeout``: a request still running in obstore's
        # threads when the process exits could abort it. The outer bound is a guard only.
        probing = open_object_store(url, retry_timeout=timeout)
        try:
            return await wait_for(probing.verify_conditional_put(), timeout + 30)
        finally:
            await probing.close()
            await store.close()

    where = f"cannot use the object store {url.split('?', 1)[0]} (gave up after {timeout:g} s)"
    try:
        conditional = asyncio.run(probe())
    except TimeoutError:
        _exit_now(f"{where}: no answer")
    except ObjectStoreError as exc:
        _exit_now(f"{where}: {exc}")
    if not conditional:
        _exit_now(f"{where}: the endpoint ignores If-None-Match on PUT (conditional writes), which the storage "
                  "needs")


def _exit_now(message: str) -> None:
    """Print a one-line error as click does and exit 1 without tearing the interpreter down: after a
    failed request obstore's runtime threads may still be busy, and one touching the interpreter while it
    is finalized aborts the process (SIGABRT) instead of exiting 1."""
    click.echo(f"Error: {message}", err=True)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def _serve(coro, metadata: str | None = None, metadata_timeout: float | None = None,
           listeners: dict[str, str] = LISTENER_SETTINGS) -> None:
    """Run a server until SIGINT/SIGTERM; a start-up failure is one line and exit code 1."""
    from .broker.data_lock import DataDirLocked
    from .broker.node import PortInUse
    from .broker.standalone import ChildBrokerFailed
    from .meta.errors import InvalidRequest, MetadataError
    from .objstore.errors import UnsupportedStoreUrl

    try:
        _run(coro)
    except KeyboardInterrupt:  # a Ctrl-C before the stop handlers were installed: nothing to clean up yet
        return
    except PortInUse as exc:
        raise click.ClickException(f"cannot start: port {exc.port} of the {exc.listener} listener is already in "
                                   f"use on {exc.host}; choose another with {listeners[exc.listener]}") from None
    except (DataDirLocked, UnsupportedStoreUrl, InvalidRequest, ChildBrokerFailed) as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    except OSError as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    except MetadataError as exc:
        where = f" {metadata}" if metadata else ""
        waited = f" (gave up after {metadata_timeout:g} s)" if metadata_timeout else ""
        raise click.ClickException(f"cannot use the metadata service{where}{waited}: {exc}") from None


@main.command()
@click_options(STANDALONE)
@_log_level_option
def standalone(**kwargs) -> None:
    """Run everything on one machine: metadata engine, object store, storage, listeners."""
    from .broker.data_lock import DataDirLocked, lock_data_dir
    from .broker.standalone import StandaloneConfig, run_standalone

    _apply_config("standalone", kwargs)
    data_dir, object_store, brokers = kwargs["data_dir"], kwargs["object_store"], kwargs["brokers"]
    if brokers > 1 and object_store and object_store.startswith("memory:"):
        raise click.UsageError("--brokers > 1 needs an object store the broker processes share (file:// or s3://)")
    if brokers > 1 and kwargs["advertised_listeners"]:
        raise click.UsageError("--advertised-listeners names one broker's addresses: run the brokers of a cluster "
                               "with `nereus broker`, each with its own")
    if object_store:
        _check_object_store(object_store, kwargs["object_store_timeout"])
    try:
        lock_data_dir(data_dir)  # before anything opens there; held until the process ends
    except DataDirLocked as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    except OSError as exc:
        raise click.ClickException(f"cannot use the data directory {data_dir}: {exc.strerror or exc}") from None
    config = StandaloneConfig(data_dir=data_dir, broker=_options_of(kwargs), oxia_port=kwargs["oxia_port"],
                              object_store=object_store, metadata_shards=kwargs["metadata_shards"],
                              session_timeout=kwargs["session_timeout"], brokers=brokers, given=kwargs)
    _serve(run_standalone(config))


@main.command()
@click_options(BROKER)
@_log_level_option
def broker(**kwargs) -> None:
    """Run one stateless broker of a cluster (Pulsar, Kafka and HTTP listeners)."""
    from .broker.run import run_broker

    _apply_config("broker", kwargs)
    metadata, object_store, metadata_timeout = kwargs["metadata"], kwargs["object_store"], kwargs["metadata_timeout"]
    for value, flag, key in ((metadata, "--metadata", "metadataStoreUrl"),
                             (object_store, "--object-store", "objectStoreUrl")):
        if not value:
            raise click.UsageError(f"{flag} (or {key} in the --config file) is required")
    if not metadata.startswith(("oxia://", "oxia+tls://")):
        raise click.UsageError(f"--metadata must be an oxia://host:port[/namespace] (or oxia+tls://) URL, "
                               f"not {metadata!r}")
    metadata = _metadata_trust(metadata, kwargs["tls_trust_certs_file"])
    if object_store.startswith("memory:"):
        raise click.ClickException("a memory:// object store cannot be shared by brokers; use file:// or s3://")
    _check_object_store(object_store, kwargs["object_store_timeout"])
    _serve(run_broker(metadata, object_store, _options_of(kwargs), session_timeout=kwargs["session_timeout"],
                      metadata_timeout=metadata_timeout), metadata, metadata_timeout)


@main.command()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("./data/meta"),
              show_default=True, help="Where the metadata engine keeps its shards.")
@click.option("--bind", default="127.0.0.1", show_default=True, help="Address the gRPC listener binds to.")
@click.option("--port", type=click.IntRange(0, 65535), default=6648, show_default=True)
@click.option("--shards", type=click.IntRange(1, 256), default=4, show_default=True,
              help="Shards of namespaces created from now on.")
@click.option("--advertised-address", default=None,
              help="host:port clients are told to use (default: the bind address).")
@click.option("--namespace", "namespaces", multiple=True,
              help="A namespace to serve besides default (repeatable).")
@click.option("--max-namespaces", type=click.IntRange(0), default=16, show_default=True,
              help="Namespaces clients may create on demand (beyond default, --namespace and earlier ones).")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Serve TLS only, with this PEM certificate (clients use oxia+tls://).")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None,
              help="PEM private key of --tls-cert.")
@click.option("--tls-trust", type=click.Path(exists=True, dir_okay=False), default=None,
              help="PEM CA certificates: clients must present a certificate one of them signed.")
@click.option("--max-connections-per-ip", type=click.IntRange(0), default=0, show_default=True,
              help="Open connections one client address may have (maxConnectionsPerIp; 0: unlimited); "
                   "more are closed as they are accepted.")
@click.option("--frame-read-timeout", type=click.FloatRange(0.1), default=30, show_default=True,
              help="Seconds an HTTP/2 frame (or TLS record) may take to arrive whole once its first bytes came; "
                   "a slower connection is closed (slow-loris guard).")
@_log_level_option
def oxia(data_dir: Path, bind: str, port: int, shards: int, advertised_address: str | None,
         namespaces: tuple[str, ...], max_namespaces: int, tls_cert: str | None, tls_key: str | None,
         tls_trust: str | None, max_connections_per_ip: int, frame_read_timeout: float) -> None:
    """Serve the metadata engine over Oxia's client protocol (gRPC)."""
    import errno

    from .broker.data_lock import DataDirLocked, lock_data_dir
    from .meta.errors import InvalidRequest
    from .meta.oxia.server import serve
    from .meta.oxia.tls import OxiaTls
    from .net_limits import ConnectionLimits

    if (tls_cert is None) != (tls_key is None) or (tls_trust and not tls_cert):
        raise click.UsageError("--tls-cert and --tls-key go together (and --tls-trust needs them)")
    tls = OxiaTls(tls_cert, tls_key, tls_trust) if tls_cert else None
    try:
        lock_data_dir(data_dir)
        limits = ConnectionLimits(max_connections_per_ip, frame_read_timeout, protocol="oxia")
        _run(serve(str(data_dir), bind, port, shards, advertised_address, namespaces=namespaces,
                   max_namespaces=max_namespaces, tls=tls, limits=limits))
    except KeyboardInterrupt:
        return
    except InvalidRequest as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    except DataDirLocked as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise click.ClickException(f"cannot start: port {port} of the oxia listener is already in use on "
                                       f"{bind}; choose another with --port") from None
        raise click.ClickException(f"cannot start: {exc}") from None
    except RuntimeError as exc:
        raise click.ClickException(f"cannot start: {exc}") from None


@main.command()
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

    from .meta.errors import MetadataError

    if lock_file is not None:
        from .broker.data_lock import hold_lock_file

        def waiting(holder: str) -> None:
            logging.getLogger("nereus.compact").warning(
                "waiting for the compaction worker %s to exit (it holds %s)", holder or "before this one", lock_file)

        hold_lock_file(lock_file, on_wait=waiting)

    objects = objects or Path("./data/objects").resolve().as_uri()
    try:
        from .lakehouse import compaction, sbt as sbt_tables
        from .lakehouse.session import default_catalog_uri, local_session
    except ImportError as exc:
        raise click.ClickException(f"the lakehouse extra is not installed ({exc})") from None
    table_catalog = None
    if sbt:
        catalog = catalog or default_catalog_uri(objects)
        if catalog is None:
            raise click.UsageError("--catalog is needed for SBT tables when the object store is not file://")
        table_catalog = sbt_tables.open_catalog(catalog, objects.rstrip("/") + "/iceberg")
    spark = local_session("nereus-compact", master)
    try:
        while True:
            try:
                report = compaction.run_job(spark, metadata, objects, topics=list(topics) or None,
                                            target_bytes=int(target_mb * (1 << 20)), min_bytes=min_bytes,
                                            max_age_seconds=max_age, catalog=table_catalog,
                                            progress=sys.stderr.isatty() if progress is None else progress)
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
            if not interval:
                break
            time.sleep(interval)
    finally:
        spark.stop()


def _report_compaction(report) -> None:
    click.echo(f"compacted {report.compacted} of {report.tasks} range(s): {report.input_bytes / 1e6:.1f} MB of WAL "
               f"-> {report.output_bytes / 1e6:.1f} MB Parquet in {report.seconds:.1f} s"
               + (f", {report.conflicts} skipped (changed meanwhile)" if report.conflicts else ""))
    for table in report.tables:
        if table.added or table.removed:
            click.echo(f"table {table.table}: +{table.added} -{table.removed} data files, offsets {table.offsets}")


@main.group("kafka-user")
def kafka_user() -> None:
    """Kafka SASL users: SCRAM credentials in the metadata service (also used by SASL/PLAIN)."""


def _metadata_options(command):
    """--metadata and the TLS files to reach a metadata service that serves TLS only."""
    for option in reversed((
            click.option("--metadata", default="oxia://127.0.0.1:6648", show_default=True,
                         help="The cluster's metadata service (the standalone's --oxia-port); oxia+tls://... "
                              "or any --tls-* option: over TLS."),
            click.option("--tls-trust-certs-file", type=click.Path(exists=True, dir_okay=False), default=None,
                         help="PEM CA certificates the metadata service's certificate must be signed by."),
            click.option("--tls-cert-file", type=click.Path(exists=True, dir_okay=False), default=None,
                         help="PEM client certificate, for a service that requires one."),
            click.option("--tls-key-file", type=click.Path(exists=True, dir_okay=False), default=None,
                         help="PEM private key of --tls-cert-file."))):
        command = option(command)
    return command


def _metadata_url(metadata: str, trust: str | None, cert: str | None, key: str | None) -> str:
    """``metadata`` with the TLS files as its ``oxia+tls://`` query (unchanged when none is given)."""
    from urllib.parse import quote

    given = [(name, value) for name, value in (("trust", trust), ("cert", cert), ("key", key)) if value]
    if not given:
        return metadata
    if (cert is None) != (key is None):
        raise click.UsageError("--tls-cert-file and --tls-key-file go together")
    if metadata.startswith("oxia://"):
        metadata = "oxia+tls://" + metadata[len("oxia://"):]
    if not metadata.startswith("oxia+tls://"):
        raise click.UsageError(f"the --tls-* options need an oxia:// or oxia+tls:// --metadata URL, not {metadata!r}")
    query = "&".join(f"{name}={quote(str(Path(value).resolve()))}" for name, value in given)
    return f"{metadata}{'&' if '?' in metadata else '?'}{query}"


async def _with_scram_store(metadata: str, work):
    from .kafka.server.security.scram_store import ScramStore
    from .meta import connect

    meta = connect(metadata, retry_timeout=10.0)
    try:
        return await work(ScramStore(meta))
    finally:
        await meta.close()


@kafka_user.command("set")
@click.argument("name")
@click.option("--mechanism", "mechanisms", multiple=True, type=click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
              help="Repeatable. Default: both.")
@click.option("--password", prompt=True, hide_input=True, help="Prompted for when not given.")
@click.option("--iterations", type=click.IntRange(4096, 16384), default=8192, show_default=True)
@_metadata_options
def kafka_user_set(name: str, mechanisms: tuple[str, ...], password: str, iterations: int, metadata: str,
                   tls_trust_certs_file, tls_cert_file, tls_key_file) -> None:
    """Create or change a user's SCRAM credentials (stored salted and hashed, never the password)."""
    from .kafka.server.security.scram import credential_from_password

    metadata = _metadata_url(metadata, tls_trust_certs_file, tls_cert_file, tls_key_file)

    async def work(store):
        for mechanism in mechanisms or ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            await store.set(name, mechanism, credential_from_password(mechanism, password, iterations=iterations))

    _run_metadata(_with_scram_store(metadata, work))
    click.echo(f"user {name}: {', '.join(mechanisms or ('SCRAM-SHA-256', 'SCRAM-SHA-512'))} set")


@kafka_user.command("delete")
@click.argument("name")
@click.option("--mechanism", "mechanisms", multiple=True, type=click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
              help="Repeatable. Default: both.")
@_metadata_options
def kafka_user_delete(name: str, mechanisms: tuple[str, ...], metadata: str, tls_trust_certs_file, tls_cert_file,
                      tls_key_file) -> None:
    """Delete a user's SCRAM credentials."""
    metadata = _metadata_url(metadata, tls_trust_certs_file, tls_cert_file, tls_key_file)

    async def work(store):
        return [m for m in mechanisms or ("SCRAM-SHA-256", "SCRAM-SHA-512") if await store.delete(name, m)]

    deleted = _run_metadata(_with_scram_store(metadata, work))
    if not deleted:
        raise click.ClickException(f"user {name} has no such credential")
    click.echo(f"user {name}: {', '.join(deleted)} deleted")


@kafka_user.command("list")
@_metadata_options
def kafka_user_list(metadata: str, tls_trust_certs_file, tls_cert_file, tls_key_file) -> None:
    """Users and their SCRAM mechanisms and iterations."""
    metadata = _metadata_url(metadata, tls_trust_certs_file, tls_cert_file, tls_key_file)

    async def work(store):
        return await store.users()

    for user, creds in sorted(_run_metadata(_with_scram_store(metadata, work)).items()):
        click.echo(f"{user}\t" + " ".join(f"{m}(iterations={c.iterations})" for m, c in sorted(creds.items())))


def _run_metadata(coro):
    from .meta.errors import MetadataError

    try:
        return asyncio.run(coro)
    except (MetadataError, OSError) as exc:
        raise click.ClickException(f"metadata service: {exc}") from None


from .admin_cli import admin as _admin  # noqa: E402 (the command group, after the commands above)
main.add_command(_admin)
main.add_command(importlib.import_module("nereus.tokens_cli").tokens)  # `nereus tokens`

if __name__ == "__main__":
    main()
