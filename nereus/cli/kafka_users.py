"""`nereus kafka-user`: the Kafka SASL users' SCRAM credentials in the metadata service."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

@click.group("kafka-user")
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
    from ..kafka.server.security.scram_store import ScramStore
    from ..meta import connect

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
    from ..kafka.server.security.scram import credential_from_password

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
    from ..meta.errors import MetadataError

    try:
        return asyncio.run(coro)
    except (MetadataError, OSError) as exc:
        raise click.ClickException(f"metadata service: {exc}") from None


__all__ = ["kafka_user"]
