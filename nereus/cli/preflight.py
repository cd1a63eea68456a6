"""The object store checked before a server starts: a mistake is one line and exit code 1, not a failed
first produce."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path

import click

def check_object_store(url: str, timeout: float) -> None:
    """Refuse, before start-up, a malformed object-store URL, a local directory this process cannot
    write, or an S3 bucket that does not take a conditional write within ``timeout`` seconds."""
    import re
    import tempfile
    from urllib.parse import unquote, urlsplit

    from ..objstore import UnsupportedStoreUrl, open_object_store

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
    from ..objstore import ObjectStoreError, open_object_store
    from ..tasks import wait_for

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


__all__ = ["check_object_store"]
