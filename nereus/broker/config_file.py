"""``--config FILE``: Pulsar's broker.conf / standalone.conf (Java properties) mapped onto the CLI's options.

Sans-io: ``parse_properties(text)`` reads the properties format and ``resolve(entries,
command)`` turns it into option values (``{parameter name: value}``) through the key
table ``KEYS``: the keys of the options (``nereus.broker.options``) and the compound
keys that set several (the Kafka listeners). A key is read under Pulsar's name where
Pulsar has one, under KoP's for Kafka settings, and under a Nereus name otherwise.
Keys of a Pulsar deployment that Nereus has no use for (ZooKeeper, BookKeeper,
managed ledger ...) and unknown keys are reported, not applied; a value that does not
convert raises ``ConfigError`` naming the key and the value.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Callable

from .options import BOTH, BROKER, OPTIONS, STANDALONE, parse_bool


class ConfigError(ValueError):
    """A key's value is not valid (or the file cannot be read)."""

    def __init__(self, key: str, value: str, reason: str) -> None:
        super().__init__(f"invalid value {value!r} for {key}: {reason}")
        self.key, self.value, self.reason = key, value, reason


# -- the properties format -------------------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2:i + 6]):
                out.append(chr(int(text[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _logical_lines(text: str):
    """(line number, logical line): comments and blank lines dropped, continuations joined."""
    pending, start = None, 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.lstrip(" \t\f")
        if pending is None:
            if not line or line[0] in "#!":
                continue
            start, pending = number, ""
        # A line ending in an odd number of backslashes continues on the next one.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            pending += line[:-1]
            continue
        yield start, pending + line
        pending = None
    if pending is not None:
        yield start, pending


def parse_properties(text: str) -> list[tuple[int, str, str]]:
    """``(line, key, value)`` for each entry of a Java properties text, in order.

    The key ends at the first unescaped ``=``, ``:`` or whitespace; whitespace around
    the separator is dropped, trailing whitespace of the value too (Pulsar trims it).
    """
    entries = []
    for number, line in _logical_lines(text):
        i = 0
        while i < len(line) and line[i] not in "=: \t\f":
            i += 2 if line[i] == "\\" else 1
        key, rest = line[:i], line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        entries.append((number, _unescape(key), _unescape(rest).strip()))
    return entries


# -- the keys ---------------------------------------------------------------------------------------

KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _listeners(text: str) -> dict[str, tuple[str, int]]:
    """KoP's ``kafkaListeners``: ``PLAINTEXT://host:port,SSL://host:port`` -> {protocol: (host, port)}."""
    out: dict[str, tuple[str, int]] = {}
    for item in (item.strip() for item in text.split(",")):
        if not item:
            continue
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:/]*):(\d+)", item)
        if match is None:
            raise ValueError(f"{item!r}: expected PROTOCOL://host:port ({', '.join(KAFKA_PROTOCOLS)})")
        protocol, host, port = match.group(1).upper(), match.group(2).strip("[]"), int(match.group(3))
        if protocol not in KAFKA_PROTOCOLS:
            raise ValueError(f"{item!r}: unknown security protocol (expected one of {', '.join(KAFKA_PROTOCOLS)})")
        if protocol in out:
            raise ValueError(f"more than one {protocol} listener")
        if not 0 <= port <= 65535:
            raise ValueError("port out of range")
        out[protocol] = (host, port)
    if not out:
        raise ValueError(f"expected PROTOCOL://host:port listeners ({', '.join(KAFKA_PROTOCOLS)})")
    return out


@dataclass(frozen=True)
class Key:
    """One configuration key: the option it sets and how its text converts."""

    name: str
    param: str | None  # the CLI parameter; None: handled by resolve() itself
    convert: Callable[[str], object]
    commands: frozenset = BOTH


#: Keys that set several options at once, or another option's value by a switch: resolve() applies them.
COMPOUND_KEYS = (
    Key("kafkaListeners", None, _listeners),  # KoP's: PLAINTEXT://host:port[,SSL://host:port,...] Kafka listeners
    Key("kafkaAdvertisedListeners", None, _listeners),  # KoP's: the host Kafka clients are told
    Key("tlsEnabled", None, parse_bool),  # Pulsar's legacy switch: TLS on the usual ports 6651 and 8443
)

KEYS: dict[str, Key] = {key.name: key for key in (
    *(Key(name, option.param, option.parser, option.commands) for option in OPTIONS for name in option.keys),
    *COMPOUND_KEYS)}

# Pulsar/KoP keys whose concern Nereus handles its own way (metadata plane, object storage,
# no BookKeeper): expected in a Pulsar operator's file, reported once as ignored.
IGNORED_PREFIXES = (
    "zookeeper", "globalZookeeper", "configurationStore", "configurationMetadataStore", "metadataStore",
    "bookkeeper", "bookie", "managedLedger", "dlog", "journal", "ledger", "dbStorage", "functionsWorker",
    "loadBalancer", "loadManager", "transaction", "authentication", "authorization", "superUserRoles",
    "brokerClient", "tls", "kafka", "messagingProtocols",
    "protocolHandler", "entryFormat", "offloaders", "systemTopic", "topicLevelPolicies", "backlogQuota",
    "brokerDeleteInactive", "brokerShutdownTimeoutMs", "numIOThreads", "numHttpServerThreads",
    "numOrderedExecutorThreads", "numExecutorThreadPoolSize", "isRunningStandalone", "webSocket",
    "schemaRegistry",
    "statusFilePath", "brokerDeduplication", "allowAutoSubscriptionCreation",
    "bootstrapNamespaces", "maxUnacked", "dispatch", "subscription",
    # Kafka's bounds on the share groups' lock duration: Nereus takes any duration its option allows
    "group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms",
)

# Values Nereus honours only in part: why, logged when the key has that value.
_UNSUPPORTED_VALUES = {
}

# Pulsar keys Nereus reads but does not apply, and why (logged whatever their value).
_NOT_APPLIED: dict[str, str] = {
}


@dataclass
class Resolved:
    """What a configuration file sets, and what it names without effect."""

    values: dict[str, object] = field(default_factory=dict)
    sources: dict[str, tuple[str, str]] = field(default_factory=dict)  # parameter -> (key, text) that set it
    ignored: list[str] = field(default_factory=list)  # keys Nereus has no use for (Pulsar's, or unknown)
    unknown: list[str] = field(default_factory=list)  # keys that look like a misspelt Nereus key
    notes: list[str] = field(default_factory=list)  # keys applied only in part, and why


def suggest(name: str) -> str | None:
    """The Nereus key ``name`` was probably meant to be (a typo would otherwise pass for a key Nereus ignores)."""
    if name.startswith(IGNORED_PREFIXES):
        return None
    close = difflib.get_close_matches(name, KEYS, n=1, cutoff=0.85)
    return close[0] if close else None


def resolve(entries: list[tuple[int, str, str]], command: str) -> Resolved:
    """The option values of ``command`` set by ``entries`` (see ``parse_properties``)."""
    out = Resolved()
    seen: dict[str, str] = {}
    listeners: dict[str, tuple[str, int]] = {}
    for _line, name, text in entries:
        seen[name] = text  # the last occurrence wins, as in java.util.Properties
    for name, text in seen.items():
        if not text:  # a blank value leaves the default, as Pulsar's configuration loader does
            continue
        if name in _NOT_APPLIED:
            out.notes.append(f"{name}={text} is not applied: {_NOT_APPLIED[name]}")
            continue
        key = KEYS.get(name)
        if key is None or command not in key.commands:
            (out.unknown if key is None and suggest(name) else out.ignored).append(name)
            continue
        try:
            value = key.convert(text)
        except ValueError as exc:
            raise ConfigError(name, text, str(exc)) from None
        why = None if isinstance(value, dict) else _UNSUPPORTED_VALUES.get((name, value))
        if why:
            out.notes.append(f"{name}={text} is not supported ({why})")
        if key.param is None:
            listeners[name] = value
            continue
        if key.param in out.values and out.values[key.param] != value:
            raise ConfigError(name, text, "contradicts {}={}".format(*out.sources[key.param]))
        out.values[key.param] = value
        out.sources[key.param] = (name, text)
    _apply_kafka_listeners(out, listeners, seen)
    return out


def _set(out: Resolved, param: str, value: object, source: tuple[str, str]) -> None:
    if param in out.values and out.values[param] != value:
        raise ConfigError(source[0], source[1], "contradicts {}={}".format(*out.sources[param]))
    out.values[param], out.sources[param] = value, source


def _apply_kafka_listeners(out: Resolved, listeners: dict, seen: dict) -> None:
    """Nereus binds every listener to one address and advertises one host for every protocol."""
    if listeners.get("tlsEnabled"):  # Pulsar's legacy switch: its usual TLS ports unless they are given
        source = ("tlsEnabled", seen["tlsEnabled"])
        out.values.setdefault("pulsar_tls_port", 6651)
        out.sources.setdefault("pulsar_tls_port", source)
        out.values.setdefault("https_port", 8443)
        out.sources.setdefault("https_port", source)
    if "kafkaListeners" in listeners:
        source = ("kafkaListeners", seen["kafkaListeners"])
        by_protocol = listeners["kafkaListeners"]
        if "PLAINTEXT" in by_protocol:
            _set(out, "kafka_port", by_protocol["PLAINTEXT"][1], source)
        else:  # SSL / SASL listeners only, as KoP allows
            _set(out, "kafka_plaintext", False, source)
        for protocol, param in (("SSL", "kafka_ssl_port"), ("SASL_PLAINTEXT", "kafka_sasl_port"),
                                ("SASL_SSL", "kafka_sasl_ssl_port")):
            if protocol in by_protocol:
                _set(out, param, by_protocol[protocol][1], source)
        for host, _port in by_protocol.values():
            bind = out.values.get("bind")
            if host and bind is None:  # KoP binds its listener there; so do all of Nereus's
                out.values["bind"], out.sources["bind"] = host, source
            elif host and host != bind:
                out.notes.append(f"kafkaListeners host {host} is not used: every listener binds to bindAddress "
                                 f"{bind}")
    if "kafkaAdvertisedListeners" in listeners:
        advertised_by = listeners["kafkaAdvertisedListeners"]
        host, port = advertised_by.get("PLAINTEXT") or next(iter(advertised_by.values()))
        advertised = out.values.get("advertised_address")
        if advertised is None and host:
            out.values["advertised_address"] = host
            out.sources["advertised_address"] = ("kafkaAdvertisedListeners", seen["kafkaAdvertisedListeners"])
        elif host and host != advertised:
            out.notes.append(f"kafkaAdvertisedListeners host {host} is not used: every protocol advertises "
                             f"advertisedAddress {advertised}")
        listen_port = out.values.get("kafka_port")
        if listen_port is not None and port != listen_port:
            out.notes.append(f"kafkaAdvertisedListeners port {port} is not used: Kafka clients are told the "
                             f"listener's port {listen_port}")


def read_config(path: str, command: str) -> Resolved:
    """Read and resolve a configuration file; an unreadable file is a ``ConfigError`` too."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("--config", path, getattr(exc, "strerror", None) or str(exc)) from None
    return resolve(parse_properties(text), command)


__all__ = ["BROKER", "KEYS", "STANDALONE", "ConfigError", "Key", "Resolved", "parse_properties", "read_config",
           "resolve", "suggest"]
