"""Key and credential values as Pulsar's configuration gives them.

``file:///path`` (or ``file:/path``, or ``file://relative/path``), ``data:;base64,...`` (or ``data:...,...``), a path to
an existing file, or else base64 text: the same forms Pulsar reads ``tokenSecretKey``,
``tokenPublicKey`` and ``basicAuthConf`` in.
"""

from __future__ import annotations

import base64
import binascii
import os
from urllib.parse import unquote_to_bytes

from ..file_urls import file_url_path
from .errors import AuthConfigError


def read_value(value: str, what: str) -> bytes:
    """The bytes ``value`` names; ``AuthConfigError`` naming ``what`` when it cannot be read."""
    value = value.strip()
    if value.startswith("data:"):
        header, sep, payload = value[len("data:"):].partition(",")
        if not sep:
            raise AuthConfigError(f"{what}: a data: URL needs a ',' before its data")
        if header.endswith(";base64"):
            return _b64(payload, what)
        return unquote_to_bytes(payload)
    if value.startswith("file:"):
        try:
            path = file_url_path(value)
        except ValueError as exc:
            raise AuthConfigError(f"{what}: {exc}") from None
        return _read_file(path, what)
    if os.path.isfile(value):
        return _read_file(value, what)
    return _b64(value, what)


def _read_file(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise AuthConfigError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise AuthConfigError(f"{what}: not a file:// or data: URL, an existing file, nor base64 data") from None


__all__ = ["read_value"]
