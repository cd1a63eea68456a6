"""Connection settings as ``pulsar-admin`` takes them: options first, then a client.conf.

A client.conf is Pulsar's ``key=value`` properties file; the keys read are
``webServiceUrl``, ``authPlugin``, ``authParams``, ``tlsTrustCertsFilePath``,
``tlsAllowInsecureConnection`` and ``tlsEnableHostnameVerification`` (others are left
alone, so Pulsar's own file works as is). ``--conf`` (or ``PULSAR_CLIENT_CONF``) names
one, which must exist; else ``$XDG_CONFIG_HOME/nereus/client.conf``
(``~/.config/nereus/client.conf``) is read when present.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from .http import AdminCliError

DEFAULT_URL = "http://localhost:8080"
_TRUE, _FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


def default_path() -> Path:
    """Where a client.conf is looked for when none is named."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "nereus" / "client.conf"


def read(path: Path) -> dict[str, str]:
    """The ``key=value`` (or ``key: value``) pairs of a properties file; ``#`` and ``!`` start comments."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise AdminCliError(f"cannot read the client configuration {path}: {exc.strerror or exc}") from None
    values = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        separator = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if separator < 0:
            raise AdminCliError(f"{path}:{number}: expected key=value, got {line!r}")
        values[line[:separator].strip()] = line[separator + 1:].strip()
    return values


def _flag(conf: dict[str, str], key: str, default: bool, path: Path | None) -> bool:
    value = conf.get(key, "").strip().lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise AdminCliError(f"{path}: {key}={conf[key]!r} is not true or false")


@dataclass(frozen=True)
class Connection:
    """Where and how ``nereus admin`` calls: URL, credentials, TLS trust."""

    url: str
    token: str | None = None
    auth_plugin: str | None = None
    auth_params: str | None = None
    trust_file: str | None = None
    allow_insecure: bool = False
    verify_hostname: bool = True

    def ssl_context(self) -> ssl.SSLContext | None:
        """The context of ``https://`` calls (None for ``http://``): the trust file's CAs, else the system's."""
        if not self.url.startswith("https://"):
            return None
        try:
            context = ssl.create_default_context(cafile=self.trust_file)
        except (OSError, ssl.SSLError) as exc:
            why = getattr(exc, "strerror", None) or exc
            raise AdminCliError(f"cannot read the trusted certificates {self.trust_file}: {why}") from None
        if self.allow_insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif not self.verify_hostname:
            context.check_hostname = False
        return context


def resolve(*, conf_path: str | None, url: str | None, token: str | None, auth_plugin: str | None,
            auth_params: str | None, trust_file: str | None, allow_insecure: bool) -> Connection:
    """The options given, each missing one from the client.conf, else the defaults."""
    path = Path(conf_path) if conf_path else default_path()
    conf = read(path) if conf_path or path.is_file() else {}
    shown = path if conf else None
    if not (token or auth_plugin) and conf.get("authPlugin"):
        auth_plugin, auth_params = conf["authPlugin"], auth_params or conf.get("authParams") or None
    return Connection(url=url or conf.get("webServiceUrl") or DEFAULT_URL,
                      token=token, auth_plugin=auth_plugin, auth_params=auth_params,
                      trust_file=trust_file or conf.get("tlsTrustCertsFilePath") or None,
                      allow_insecure=allow_insecure or _flag(conf, "tlsAllowInsecureConnection", False, shown),
                      verify_hostname=_flag(conf, "tlsEnableHostnameVerification", True, shown))


__all__ = ["Connection", "DEFAULT_URL", "default_path", "read", "resolve"]
