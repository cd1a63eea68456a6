"""The `nereus` command line."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import click


def _run(coro) -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is pinned, but keep the CLI usable where it cannot build
        asyncio.run(coro)
    else:
        uvloop.run(coro)


@click.group()
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def main(log_level: str) -> None:
    """Nereus: a Pulsar-native, Kafka-compatible streaming engine on object storage."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@main.command()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("./data"),
              show_default=True, help="Where the metadata engine and the local object store keep their files.")
@click.option("--bind", default="127.0.0.1", show_default=True, help="Address the listeners bind to.")
@click.option("--http-port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--pulsar-port", type=click.IntRange(0, 65535), default=6650, show_default=True)
@click.option("--kafka-port", type=click.IntRange(0, 65535), default=9092, show_default=True)
@click.option("--oxia-port", type=click.IntRange(0, 65535), default=6648, show_default=True)
@click.option("--object-store", default=None, help="Object store URL (file://, s3://, memory://). "
              "Default: file://DATA_DIR/objects")
@click.option("--metadata-shards", type=click.IntRange(1, 256), default=1, show_default=True,
              help="Shards of a new metadata namespace (one fsync stream each; 1 suits a single machine).")
def standalone(data_dir: Path, bind: str, http_port: int, pulsar_port: int, kafka_port: int, oxia_port: int,
               object_store: str | None, metadata_shards: int) -> None:
    """Run everything in one process: metadata engine, object store, storage, listeners."""
    from .broker.standalone import StandaloneConfig, run_standalone
    from .objstore.errors import UnsupportedStoreUrl

    config = StandaloneConfig(data_dir=data_dir, bind=bind, http_port=http_port, pulsar_port=pulsar_port,
                              kafka_port=kafka_port, oxia_port=oxia_port, object_store=object_store,
                              metadata_shards=metadata_shards)
    try:
        _run(run_standalone(config))
    except UnsupportedStoreUrl as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot start: {exc}") from None


@main.command()
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("./data/meta"),
              show_default=True, help="Where the metadata engine keeps its shards.")
@click.option("--bind", default="127.0.0.1", show_default=True, help="Address the gRPC listener binds to.")
@click.option("--port", type=click.IntRange(0, 65535), default=6648, show_default=True)
@click.option("--shards", type=click.IntRange(1, 256), default=4, show_default=True,
              help="Shards of namespaces created from now on.")
@click.option("--advertised-address", default=None,
              help="host:port clients are told to use (default: the bind address).")
def oxia(data_dir: Path, bind: str, port: int, shards: int, advertised_address: str | None) -> None:
    """Serve the metadata engine over Oxia's client protocol (gRPC)."""
    from .meta.oxia.server import serve

    try:
        _run(serve(str(data_dir), bind, port, shards, advertised_address))
    except (OSError, RuntimeError) as exc:
        raise click.ClickException(f"cannot start: {exc}") from None


if __name__ == "__main__":
    main()
