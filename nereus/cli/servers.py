"""The server commands: `nereus standalone`, `nereus broker` and `nereus oxia`."""

from __future__ import annotations

from pathlib import Path

import click

from ..broker.options import BROKER, STANDALONE, click_options
from .broker_options import apply_config, metadata_trust, options_of
from .common import log_level_option, run
from .preflight import check_object_store

#: The flag and the configuration key that set each listener's port.
LISTENER_SETTINGS = {"http": "--http-port (webServicePort)", "pulsar": "--pulsar-port (brokerServicePort)",
                     "bind-address": "--bind-addresses (bindAddresses)",
                     "kafka": "--kafka-port (kafkaListeners)", "oxia": "--oxia-port (oxiaPort)",
                     "pulsar-tls": "--pulsar-tls-port (brokerServicePortTls)",
                     "https": "--https-port (webServicePortTls)", "kafka-ssl": "--kafka-ssl-port (kafkaListeners)"}


def run_server(coro, metadata: str | None = None, metadata_timeout: float | None = None,
               listeners: dict[str, str] = LISTENER_SETTINGS) -> None:
    """Run a server until SIGINT/SIGTERM; a start-up failure is one line and exit code 1."""
    from ..broker.data_lock import DataDirLocked
    from ..broker.node import PortInUse
    from ..broker.standalone import ChildBrokerFailed
    from ..meta.errors import InvalidRequest, MetadataError
    from ..objstore.errors import UnsupportedStoreUrl

    try:
        run(coro)
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


@click.command()
@click_options(STANDALONE)
@log_level_option
def standalone(**kwargs) -> None:
    """Run everything on one machine: metadata engine, object store, storage, listeners."""
    from ..broker.data_lock import DataDirLocked, lock_data_dir
    from ..broker.standalone import StandaloneConfig, run_standalone

    apply_config("standalone", kwargs)
    data_dir, object_store, brokers = kwargs["data_dir"], kwargs["object_store"], kwargs["brokers"]
    if brokers > 1 and object_store and object_store.startswith("memory:"):
        raise click.UsageError("--brokers > 1 needs an object store the broker processes share (file:// or s3://)")
    if brokers > 1 and kwargs["advertised_listeners"]:
        raise click.UsageError("--advertised-listeners names one broker's addresses: run the brokers of a cluster "
                               "with `nereus broker`, each with its own")
    if object_store:
        check_object_store(object_store, kwargs["object_store_timeout"])
    try:
        lock_data_dir(data_dir)  # before anything opens there; held until the process ends
    except DataDirLocked as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    except OSError as exc:
        raise click.ClickException(f"cannot use the data directory {data_dir}: {exc.strerror or exc}") from None
    config = StandaloneConfig(data_dir=data_dir, broker=options_of(kwargs), oxia_port=kwargs["oxia_port"],
                              object_store=object_store, metadata_shards=kwargs["metadata_shards"],
                              session_timeout=kwargs["session_timeout"], brokers=brokers, given=kwargs)
    run_server(run_standalone(config))


@click.command()
@click_options(BROKER)
@log_level_option
def broker(**kwargs) -> None:
    """Run one stateless broker of a cluster (Pulsar, Kafka and HTTP listeners)."""
    from ..broker.run import run_broker

    apply_config("broker", kwargs)
    metadata, object_store, metadata_timeout = kwargs["metadata"], kwargs["object_store"], kwargs["metadata_timeout"]
    for value, flag, key in ((metadata, "--metadata", "metadataStoreUrl"),
                             (object_store, "--object-store", "objectStoreUrl")):
        if not value:
            raise click.UsageError(f"{flag} (or {key} in the --config file) is required")
    if not metadata.startswith(("oxia://", "oxia+tls://")):
        raise click.UsageError(f"--metadata must be an oxia://host:port[/namespace] (or oxia+tls://) URL, "
                               f"not {metadata!r}")
    metadata = metadata_trust(metadata, kwargs["tls_trust_certs_file"])
    if object_store.startswith("memory:"):
        raise click.ClickException("a memory:// object store cannot be shared by brokers; use file:// or s3://")
    check_object_store(object_store, kwargs["object_store_timeout"])
    run_server(run_broker(metadata, object_store, options_of(kwargs), session_timeout=kwargs["session_timeout"],
                      metadata_timeout=metadata_timeout), metadata, metadata_timeout)


@click.command()
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
@log_level_option
def oxia(data_dir: Path, bind: str, port: int, shards: int, advertised_address: str | None,
         namespaces: tuple[str, ...], max_namespaces: int, tls_cert: str | None, tls_key: str | None,
         tls_trust: str | None, max_connections_per_ip: int, frame_read_timeout: float) -> None:
    """Serve the metadata engine over Oxia's client protocol (gRPC)."""
    import errno

    from ..broker.data_lock import DataDirLocked, lock_data_dir
    from ..meta.errors import InvalidRequest
    from ..meta.oxia.server import serve
    from ..meta.oxia.tls import OxiaTls
    from ..net_limits import ConnectionLimits

    if (tls_cert is None) != (tls_key is None) or (tls_trust and not tls_cert):
        raise click.UsageError("--tls-cert and --tls-key go together (and --tls-trust needs them)")
    tls = OxiaTls(tls_cert, tls_key, tls_trust) if tls_cert else None
    try:
        lock_data_dir(data_dir)
        limits = ConnectionLimits(max_connections_per_ip, frame_read_timeout, protocol="oxia")
        run(serve(str(data_dir), bind, port, shards, advertised_address, namespaces=namespaces,
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


__all__ = ["LISTENER_SETTINGS", "broker", "oxia", "run_server", "standalone"]
