"""The credentials one broker shows another's services (Pulsar's ``brokerClientAuthenticationPlugin``
and ``brokerClientAuthenticationParameters``), and the check those services make.

Only token authentication is supported, with the parameters Pulsar's ``AuthenticationToken``
takes: ``token:<jwt>``, ``file:///path`` (read again for each new connection, so a rotated
token is picked up), a JSON object ``{"token": ...}`` or ``{"file": ...}``, or the token itself
(as ``nereus admin --auth-params``, which may not import this floor).
A service accepts a broker whose token proves one of ``superUserRoles``, as Pulsar's brokers
authenticate to each other.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from ..file_urls import file_url_path
from .errors import AuthConfigError, AuthenticationFailed

TOKEN_PLUGINS = ("org.apache.pulsar.client.impl.auth.AuthenticationToken", "AuthenticationToken", "token")


def broker_token(plugin: str | None, parameters: str | None) -> Callable[[], bytes] | None:
    """The supplier of this broker's token (None without parameters); AuthConfigError if unusable."""
    if not parameters:
        if plugin:
            raise AuthConfigError("brokerClientAuthenticationPlugin needs brokerClientAuthenticationParameters")
        return None
    if plugin and plugin not in TOKEN_PLUGINS:
        raise AuthConfigError(f"brokerClientAuthenticationPlugin {plugin!r} is not supported (use {TOKEN_PLUGINS[0]})")
    text = parameters.strip()
    if text.startswith("{"):
        try:
            given = json.loads(text)
        except ValueError:
            raise AuthConfigError("brokerClientAuthenticationParameters is not valid JSON") from None
        if not isinstance(given, dict) or not ({"token", "file"} & set(given)):
            raise AuthConfigError('brokerClientAuthenticationParameters as JSON needs "token" or "file"')
        text = f"token:{given['token']}" if "token" in given else "file:" + str(given["file"]).removeprefix("file:")
    if not text.startswith("file:"):
        token = text.removeprefix("token:").strip().encode()
        if not token:
            raise AuthConfigError("brokerClientAuthenticationParameters names an empty token")
        return lambda: token
    try:
        path = Path(file_url_path(text))
    except ValueError as exc:
        raise AuthConfigError(f"brokerClientAuthenticationParameters: {exc}") from None
    if not path.is_file():
        raise AuthConfigError(f"brokerClientAuthenticationParameters: no token file {path}")

    def from_file() -> bytes:
        try:
            return path.read_bytes().strip()
        except OSError as exc:
            raise AuthenticationFailed(f"cannot read the broker token file {path}: {exc.strerror}") from None

    return from_file


def superuser_check(authenticator, super_user_roles: Sequence[str]) -> Callable[[bytes], tuple[str, float | None]]:
    """``token -> (role, expiry)`` for a service only brokers may use: the token must prove a superuser."""
    allowed = frozenset(super_user_roles)

    def check(token: bytes) -> tuple[str, float | None]:
        identity = authenticator.authenticate("token", token)
        if identity.role not in allowed:
            raise AuthenticationFailed(f"role {identity.role!r} is not one of superUserRoles: brokers only")
        return identity.role, identity.expires_at

    return check
