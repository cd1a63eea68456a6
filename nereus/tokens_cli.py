"""``nereus tokens``: Pulsar's ``pulsar tokens`` (keys and JWTs for token authentication).

Keys are written as Pulsar writes them (raw secret bytes, DER key pairs), so files and
tokens move between Nereus and Pulsar either way.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import click

from .auth import AuthConfigError, AuthenticationFailed
from .auth.keys import read_value
from .auth.tokens import (ASYMMETRIC_ALGORITHMS, HMAC_ALGORITHMS, TokenValidator, create_key_pair, create_secret_key,
                          create_token, decode_unverified, parse_duration)


def _write(path: Path | None, data: bytes, *, secret: bool = False) -> None:
    """``data`` to ``path`` (standard output without one); a ``secret`` file is readable by its owner only."""
    if path is None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    try:
        if not secret:
            path.write_bytes(data)
            return
        # Created 0600 so the key is never readable by others, not even between the write and a chmod.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o600)  # a file that existed before keeps its mode otherwise
            f.write(data)
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None


def _key(value: str, what: str) -> bytes:
    try:
        return read_value(value, what)
    except AuthConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _token_text(token: str | None, stdin: bool, token_file: Path | None) -> str:
    given = [bool(token), stdin, token_file is not None]
    if sum(given) != 1:
        raise click.UsageError("give the token as an argument, with -i/--stdin or with -f/--token-file (one of them)")
    if stdin:
        return sys.stdin.read().strip()
    if token_file is not None:
        try:
            return token_file.read_text().strip()
        except OSError as exc:
            raise click.ClickException(f"cannot read {token_file}: {exc.strerror or exc}") from None
    return token.strip()


def _token_source(command):
    for option in reversed([
        click.argument("token", required=False),
        click.option("-i", "--stdin", is_flag=True, help="Read the token from standard input."),
        click.option("-f", "--token-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="Read the token from a file."),
    ]):
        command = option(command)
    return command


@click.group()
def tokens() -> None:
    """Keys and tokens for token authentication (as `pulsar tokens`)."""


@tokens.command("create-secret-key")
@click.option("-a", "--signature-algorithm", type=click.Choice(HMAC_ALGORITHMS), default="HS256", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the key to this file (default: standard output).")
@click.option("-b", "--base64", "as_base64", is_flag=True, help="Write the key base64-encoded.")
def create_secret_key_command(signature_algorithm: str, output: Path | None, as_base64: bool) -> None:
    """A new secret key (raw bytes) for HS256/384/512 tokens (tokenSecretKey)."""
    key = create_secret_key(signature_algorithm)
    _write(output, base64.b64encode(key) if as_base64 else key, secret=True)


@tokens.command("create-key-pair")
@click.option("-a", "--signature-algorithm", type=click.Choice(ASYMMETRIC_ALGORITHMS), default="RS256",
              show_default=True)
@click.option("--output-private-key", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--output-public-key", type=click.Path(dir_okay=False, path_type=Path), required=True)
def create_key_pair_command(signature_algorithm: str, output_private_key: Path, output_public_key: Path) -> None:
    """A new private/public key pair (DER) for RS/ES tokens (the broker's tokenPublicKey)."""
    private, public = create_key_pair(signature_algorithm)
    _write(output_private_key, private, secret=True)
    _write(output_public_key, public)


@tokens.command("create")
@click.option("-s", "--subject", required=True, help="The role the token proves (its sub claim).")
@click.option("-e", "--expiry-time", default=None, help="Lifetime: 30s, 10m, 1h, 7d, 1y (default: no expiry).")
@click.option("-sk", "--secret-key", default=None, help="Sign with this secret key: file:///path or data:;base64,...")
@click.option("-pk", "--private-key", default=None, help="Sign with this private key: file:///path or data:...")
@click.option("-a", "--signature-algorithm", type=click.Choice(HMAC_ALGORITHMS + ASYMMETRIC_ALGORITHMS),
              default=None, help="Default: HS256 with a secret key, RS256/ES256 after a private key's type.")
def create_command(subject: str, expiry_time: str | None, secret_key: str | None, private_key: str | None,
                   signature_algorithm: str | None) -> None:
    """Print a new token for SUBJECT."""
    if (secret_key is None) == (private_key is None):
        raise click.UsageError("give either --secret-key or --private-key")
    try:
        expires_in = parse_duration(expiry_time) if expiry_time else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--expiry-time") from None
    try:
        token = create_token(subject, algorithm=signature_algorithm, expires_in=expires_in,
                             secret_key=_key(secret_key, "--secret-key") if secret_key else None,
                             private_key=_key(private_key, "--private-key") if private_key else None)
    except AuthConfigError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(token)


@tokens.command("show")
@_token_source
def show_command(token: str | None, stdin: bool, token_file: Path | None) -> None:
    """Print a token's header and claims (without checking its signature)."""
    try:
        header, claims = decode_unverified(_token_text(token, stdin, token_file))
    except AuthenticationFailed as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(json.dumps(header))
    click.echo("---")
    click.echo(json.dumps(claims))


@tokens.command("validate")
@_token_source
@click.option("-sk", "--secret-key", default=None, help="Check with this secret key: file:///path or data:...")
@click.option("-pk", "--public-key", default=None, help="Check with this public key: file:///path or data:...")
def validate_command(token: str | None, stdin: bool, token_file: Path | None, secret_key: str | None,
                     public_key: str | None) -> None:
    """Check a token's signature and expiry; print its claims (exit code 1 when it is not valid)."""
    if (secret_key is None) == (public_key is None):
        raise click.UsageError("give either --secret-key or --public-key")
    text = _token_text(token, stdin, token_file)
    try:
        validator = TokenValidator(secret_key=_key(secret_key, "--secret-key") if secret_key else None,
                                   public_key=_key(public_key, "--public-key") if public_key else None)
        checked = validator.validate(text)
    except (AuthConfigError, AuthenticationFailed) as exc:
        raise click.ClickException(f"token is not valid: {exc}") from None
    click.echo(json.dumps(checked.claims))


__all__ = ["tokens"]
