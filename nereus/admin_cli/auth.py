"""Auth options as ``pulsar-admin`` takes them, turned into request headers.

The broker checks them when its authentication is on (else it ignores them).
``--token T`` sends ``Authorization: Bearer T``. ``--auth-plugin`` takes Pulsar's class
names (or their short names): the token plugin with ``--auth-params token:T``,
``file:/path`` or ``{"token": "T"}``; the basic plugin with
``{"userId": "u", "password": "p"}`` (or ``userId:u,password:p``).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from ..file_urls import file_url_path
from .http import AdminCliError

TOKEN_PLUGINS = {"org.apache.pulsar.client.impl.auth.AuthenticationToken", "AuthenticationToken", "token"}
BASIC_PLUGINS = {"org.apache.pulsar.client.impl.auth.AuthenticationBasic", "AuthenticationBasic", "basic"}


def _params(raw: str) -> dict[str, str]:
    """``{"k": "v"}`` JSON or ``k:v,k2:v2``."""
    raw = raw.strip()
    if raw.startswith("{"):
        try:
            value = json.loads(raw)
        except ValueError:
            raise AdminCliError("--auth-params is not valid JSON") from None
        return {str(k): str(v) for k, v in value.items()}
    pairs = {}
    for item in filter(None, (p.strip() for p in raw.split(","))):
        key, sep, value = item.partition(":")
        if not sep:
            raise AdminCliError(f"--auth-params: {item!r} is not key:value")
        pairs[key] = value
    return pairs


def _token(raw: str) -> str:
    raw = raw.strip()
    if raw.startswith("{"):
        params = _params(raw)
        if "token" in params:
            return params["token"]
        if "file" in params:
            raw = "file:" + params["file"]
        else:
            raise AdminCliError("--auth-params of the token plugin needs token or file")
    if raw.startswith("token:"):
        return raw[len("token:"):]
    if raw.startswith("file:"):
        try:
            path = file_url_path(raw)
        except ValueError as exc:
            raise AdminCliError(f"--auth-params: {exc}") from None
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise AdminCliError(f"cannot read the token file {path}: {exc.strerror}") from None
    return raw


def headers(*, token: str | None, plugin: str | None, params: str | None) -> dict[str, str]:
    """The ``Authorization`` header the options ask for (none without options)."""
    if token:
        return {"Authorization": f"Bearer {token}"}
    if not plugin:
        if params:
            raise AdminCliError("--auth-params needs --auth-plugin")
        return {}
    if plugin in TOKEN_PLUGINS:
        return {"Authorization": f"Bearer {_token(params or '')}"}
    if plugin in BASIC_PLUGINS:
        values = _params(params or "")
        if "userId" not in values or "password" not in values:
            raise AdminCliError("--auth-params of the basic plugin needs userId and password")
        pair = f"{values['userId']}:{values['password']}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
    raise AdminCliError(f"unsupported --auth-plugin {plugin}: use the token or basic plugin, or --token")


__all__ = ["headers"]
