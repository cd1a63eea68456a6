"""Pulsar's advertised listeners: ``advertisedListeners`` and ``internalListenerName`` (sans-io).

``advertisedListeners=internal:pulsar://10.0.0.5:6650,external:pulsar://broker.example.com:6651``
names the addresses clients in different networks reach the broker by. A client
picks one with its ``listener_name``; its lookups (binary and HTTP) then answer that
listener's URL. The internal listener (``internalListenerName``, default: the first
one) is what the brokers tell each other and what clients naming no listener get.

The rules are Pulsar's: each listener has a ``pulsar://`` or a ``pulsar+ssl://`` URL (or
both, the ``brokerServiceUrl`` and ``brokerServiceUrlTls`` of its lookups) and may add
``http://`` and ``https://`` ones (the ``httpUrl`` / ``httpUrlTls`` of its HTTP lookups);
one host:port belongs to one listener; ``advertisedAddress`` and ``advertisedListeners``
do not go together. The internal listener needs a ``pulsar://`` URL: brokers reach each
other by it.

As in Pulsar, advertising an address binds nothing (it may be a load balancer's or a
NAT's): the broker listens on its Pulsar port, and on each of ``bindAddresses``
(``external:pulsar://0.0.0.0:6651,...``). A client that connected to a bind
address and names no listener is answered that bind address's listener.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

_NAME = re.compile(r"[A-Za-z0-9_.-]+")
_SCHEMES = ("pulsar", "pulsar+ssl", "http", "https")


class ListenerError(ValueError):
    """An ``advertisedListeners`` / ``internalListenerName`` setting that cannot be used."""


@dataclass(frozen=True)
class AdvertisedListener:
    name: str
    pulsar_url: str  # pulsar://host:port, or "" (a TLS-only listener)
    http_url: str = ""  # http://host:port, or "" (the broker's own)
    pulsar_tls_url: str = ""  # pulsar+ssl://host:port, or ""
    https_url: str = ""  # https://host:port, or ""

    @property
    def host(self) -> str:
        return urlsplit(self.pulsar_url or self.pulsar_tls_url).hostname or ""

    @property
    def port(self) -> int:
        return urlsplit(self.pulsar_url or self.pulsar_tls_url).port or 0

    def as_tuple(self) -> tuple[str, ...]:
        """As broker records keep it (``BrokerAddress.listeners``): the TLS URLs only when there are some."""
        out = (self.name, self.pulsar_url, self.http_url)
        return out + (self.pulsar_tls_url, self.https_url) if self.pulsar_tls_url or self.https_url else out


def _url(listener: str, text: str) -> tuple[str, str, int]:
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        raise ListenerError(f"listener {listener!r}: {text!r} is not a scheme://host:port URL") from None
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES:
        raise ListenerError(f"listener {listener!r}: {text!r} must be a pulsar://, pulsar+ssl://, http:// or "
                            "https:// URL")
    if not parts.hostname or not port or parts.path not in ("", "/"):
        raise ListenerError(f"listener {listener!r}: {text!r} must be {scheme}://host:port")
    return scheme, parts.hostname, port


def parse_listeners(text: str, internal: str | None = None) -> tuple[tuple[AdvertisedListener, ...], str]:
    """The listeners of an ``advertisedListeners`` value and the internal listener's name."""
    urls: dict[str, dict[str, str]] = {}
    owners: dict[str, str] = {}  # host:port -> listener
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, url = entry.partition(":")
        name, url = name.strip(), url.strip()
        if not sep or not _NAME.fullmatch(name) or url.startswith("//"):  # the latter: a URL without a name
            raise ListenerError(f"{entry!r} must be name:pulsar://host:port")
        scheme, host, port = _url(name, url)
        mine = urls.setdefault(name, {})
        if scheme in mine:
            raise ListenerError(f"listener {name!r} has more than one {scheme}:// URL")
        mine[scheme] = f"{scheme}://{host}:{port}"
        owner = owners.setdefault(f"{host}:{port}", name)
        if owner != name:
            raise ListenerError(f"{host}:{port} is given to two listeners, {owner!r} and {name!r}")
    if not urls:
        raise ListenerError("no listener given (expected name:pulsar://host:port,...)")
    listeners = []
    for name, mine in urls.items():
        if "pulsar" not in mine and "pulsar+ssl" not in mine:
            raise ListenerError(f"listener {name!r} has no pulsar://host:port nor pulsar+ssl://host:port URL")
        listeners.append(AdvertisedListener(name, mine.get("pulsar", ""), mine.get("http", ""),
                                            mine.get("pulsar+ssl", ""), mine.get("https", "")))
    internal = internal or listeners[0].name
    if internal not in urls:
        raise ListenerError(f"the internal listener {internal!r} is not one of the advertised listeners "
                            f"({', '.join(urls)})")
    if "pulsar" not in urls[internal]:
        raise ListenerError(f"the internal listener {internal!r} has no pulsar://host:port URL (brokers reach "
                            "each other by it)")
    return tuple(listeners), internal


def parse_bind_addresses(text: str, listeners: tuple[AdvertisedListener, ...]) -> tuple[tuple[str, str, int], ...]:
    """The (listener, host, port) of a ``bindAddresses`` value; each names an advertised listener."""
    names = {li.name for li in listeners}
    out = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        name, sep, url = entry.partition(":")
        name = name.strip()
        if not sep or not _NAME.fullmatch(name):
            raise ListenerError(f"bind address {entry!r} must be name:pulsar://host:port")
        scheme, host, port = _url(name, url.strip())
        if scheme != "pulsar":
            raise ListenerError(f"bind address {entry!r} must be a pulsar:// URL")
        if name not in names:
            raise ListenerError(f"bind address {entry!r} names no advertised listener "
                                f"({', '.join(sorted(names)) or 'none is configured'})")
        out.append((name, host, port))
    return tuple(out)


__all__ = ["AdvertisedListener", "ListenerError", "parse_bind_addresses", "parse_listeners"]
