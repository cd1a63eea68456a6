"""``--config FILE``: Pulsar's broker.conf / standalone.conf (Java properties) mapped onto the CLI's options.

Sans-io: ``parse_properties(text)`` reads the properties format and ``resolve(entries,
command)`` turns it into option values (``{parameter name: value}``) through the key
table ``KEYS``. A key is read under Pulsar's name where Pulsar has one, under KoP's
for Kafka settings, and under a Nereus name otherwise. Keys of a Pulsar
deployment that Nereus has no use for (ZooKeeper, BookKeeper, managed ledger ...)
and unknown keys are reported, not applied; a value that does not convert raises
``ConfigError`` naming the key and the value.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Callable

STANDALONE = "standalone"
BROKER = "broker"
BOTH = frozenset({STANDALONE, BROKER})


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


# -- value converters (each raises ValueError with the reason) ----------------------------------------

def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError("not an integer") from None


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError("not a number") from None


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError("expected true or false")


def _text(text: str) -> str:
    if not text:
        raise ValueError("empty")
    return text


def _millis(text: str) -> float:
    return _float(text) / 1000.0


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


def _mechanisms(text: str) -> str:
    from ..kafka.server.sasl import parse_mechanisms

    return ",".join(parse_mechanisms(text))


def _creation_type(text: str) -> str:
    if text not in ("non-partitioned", "partitioned"):
        raise ValueError("expected non-partitioned or partitioned")
    return text


@dataclass(frozen=True)
class Key:
    """One configuration key: the option it sets and how its text converts."""

    name: str
    param: str | None  # the CLI parameter; None: handled by resolve() itself
    convert: Callable[[str], object]
    commands: frozenset = BOTH
    doc: str = ""


KEYS: dict[str, Key] = {k.name: k for k in (
    Key("bindAddress", "bind", _text, doc="Address every listener binds to."),
    Key("advertisedAddress", "advertised_address", _text, doc="Host name clients are told to use."),
    Key("advertisedListeners", "advertised_listeners", _text,
        doc="name:pulsar://host:port,... told to clients by their listener_name."),
    Key("internalListenerName", "internal_listener_name", _text, doc="The default advertised listener."),
    Key("bindAddresses", "bind_addresses", _text, doc="listener:pulsar://host:port,... more Pulsar ports to bind."),
    Key("webServicePort", "http_port", _int, doc="HTTP port (admin REST API, metrics)."),
    Key("brokerServicePort", "pulsar_port", _int, doc="Pulsar binary protocol port."),
    Key("kafkaListeners", None, _listeners,
        doc="KoP: PLAINTEXT://host:port[,SSL://host:port,...] Kafka listeners (PLAINTEXT may be left out)."),
    Key("kafkaAdvertisedListeners", None, _listeners, doc="KoP: PLAINTEXT://host:port told to Kafka clients."),
    Key("saslAllowedMechanisms", "sasl_mechanisms", _mechanisms,
        doc="KoP: SASL mechanisms of the SASL listeners (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)."),
    Key("brokerServicePortTls", "pulsar_tls_port", _int, doc="Pulsar binary protocol over TLS (pulsar+ssl://)."),
    Key("webServicePortTls", "https_port", _int, doc="HTTPS port (admin REST API, lookup, metrics)."),
    Key("tlsEnabled", None, _bool, doc="Legacy: TLS on brokerServicePortTls 6651 and webServicePortTls 8443."),
    Key("tlsCertificateFilePath", "tls_cert_file", _text, doc="PEM certificate (chain) of every TLS listener."),
    Key("tlsKeyFilePath", "tls_key_file", _text, doc="PEM private key of that certificate."),
    Key("tlsTrustCertsFilePath", "tls_trust_certs_file", _text, doc="PEM CA certificates client certificates "
        "are verified against."),
    Key("tlsAllowInsecureConnection", "tls_allow_insecure", _bool, doc="Ask no client certificate."),
    Key("tlsRequireTrustedClientCertOnConnect", "tls_require_client_cert", _bool,
        doc="Refuse TLS clients without a trusted certificate."),
    Key("tlsOffloadProcesses", "tls_offload_processes", _int,
        doc="Worker processes ending TLS of the Pulsar and Kafka TLS listeners (0: in the broker)."),
    Key("clusterName", "cluster_name", _text, doc="Name of the cluster."),
    Key("metadataStoreUrl", "metadata", _text, frozenset({BROKER}), doc="oxia://host:port[/namespace]."),
    Key("metadataStoreSessionTimeoutMillis", "session_timeout", _millis,
        doc="A broker that stopped heartbeating this long loses its topics."),
    Key("metadataStoreOperationTimeoutSeconds", "metadata_timeout", _float, frozenset({BROKER}),
        doc="Seconds to keep retrying an unreachable metadata service at start-up."),
    Key("allowAutoTopicCreation", "auto_topic_creation", _bool,
        doc="Missing topics are created on first use (inside existing namespaces)."),
    Key("allowAutoTopicCreationType", "auto_topic_creation_type", _creation_type,
        doc="non-partitioned or partitioned: what a Pulsar client's first use creates."),
    Key("defaultNumPartitions", "default_partitions", _int, doc="Partitions of an auto-created topic."),
    Key("num.partitions", "default_partitions", _int, doc="Kafka's name for defaultNumPartitions."),
    Key("maxNumPartitionsPerPartitionedTopic", "max_num_partitions_per_partitioned_topic", _int,
        doc="Most partitions a topic may be created or grown to (0: Nereus' ceiling, 10000)."),
    Key("maxReplicationFactor", "max_replication_factor", _int,
        doc="Largest replication factor a Kafka client may create a topic with (any up to it is accepted)."),
    Key("schemaCompatibilityStrategy", "schema_compatibility_strategy", _text,
        doc="Schema compatibility of namespaces and topics without a policy (FULL, BACKWARD, ...)."),
    Key("brokerDeduplicationEnabled", "deduplication", _bool,
        doc="Deduplication of namespaces without a policy of their own."),
    Key("defaultRetentionTimeInMinutes", "default_retention_minutes", _int,
        doc="Retention time of namespaces without a retention policy (-1: unlimited)."),
    Key("defaultRetentionSizeInMB", "default_retention_mb", _int,
        doc="Retention size of namespaces without a retention policy (-1: unlimited)."),
    Key("maxMessageSize", "max_message_size", _int, doc="Largest message (bytes) a producer may send."),
    Key("maxConnectionsPerIp", "max_connections_per_ip", _int,
        doc="Open connections per client address and protocol, admin HTTP and Oxia too (0: unlimited)."),
    Key("max.connection.creation.rate", "max_connection_creation_rate", _float,
        doc="Kafka's: new Kafka connections a second over all addresses (0: unlimited); more wait."),
    Key("frameReadTimeoutSeconds", "frame_read_timeout", _float,
        doc="Seconds a started frame or HTTP request header may take to arrive whole (slow-loris guard)."),
    Key("maxPendingBytesPerConnection", "max_pending_bytes_per_connection", _int,
        doc="Bytes of requests a connection may have waiting for answers before it is not read."),
    Key("maxPendingBytesPerBroker", "max_pending_bytes_per_broker", _int,
        doc="Bytes of requests all connections together may have waiting before none is read."),
    Key("maxPendingPublishRequestsPerConnection", "max_pending_publish_requests_per_connection", _int,
        doc="Pulsar SENDs a connection may have waiting for storage before it is not read."),
    Key("group.consumer.heartbeat.interval.ms", "consumer_group_heartbeat_interval", _millis,
        doc="Kafka's: milliseconds between a KIP-848 consumer's heartbeats."),
    Key("group.consumer.session.timeout.ms", "consumer_group_session_timeout", _millis,
        doc="Kafka's: a KIP-848 consumer silent this long leaves its group."),
    Key("transactional.id.expiration.ms", "transactional_id_expiration", _millis,
        doc="A Kafka transactional id idle this long (no open transaction) is forgotten."),
    Key("dataDir", "data_dir", _text, frozenset({STANDALONE}), doc="Metadata and local object store files."),
    Key("oxiaPort", "oxia_port", _int, frozenset({STANDALONE}), doc="Oxia protocol (metadata) port."),
    Key("objectStoreUrl", "object_store", _text, doc="file://, s3:// or memory:// object store."),
    Key("objectStoreTimeoutSeconds", "object_store_timeout", _float,
        doc="Seconds an s3:// object store may take to answer the start-up check."),
    Key("metadataShards", "metadata_shards", _int, frozenset({STANDALONE}), doc="Shards of a new namespace."),
    Key("numBrokers", "brokers", _int, frozenset({STANDALONE}), doc="Broker processes to run."),
    Key("availabilityZone", "zone", _text, doc="Availability zone (Kafka rack) of the broker."),
    Key("brokerName", "broker_name", _text, doc="Stable broker name (keeps its Kafka node id)."),
    Key("gcIntervalSeconds", "gc_interval", _float, doc="Seconds between garbage collection passes."),
    Key("gcGraceSeconds", "gc_grace", _float, doc="Seconds a released object is kept for readers."),
    Key("gcPendingTimeoutSeconds", "gc_pending_timeout", _float, doc="Seconds before an unfinished write is resolved (at least 20)."),
    Key("compactionIntervalSeconds", "compaction_interval", _float, doc="Seconds between compaction runs (0: none)."),
    Key("compactionMaxAgeSeconds", "compaction_max_age", _float, doc="Compact records once this old ..."),
    Key("compactionMinMB", "compaction_min_mb", _float, doc="... or once there are this many MB of them."),
    Key("brokerServiceCompactionMonitorIntervalInSeconds", "compaction_monitor_interval", _float,
        doc="Seconds between checks of the compactionThreshold policies (0: none)."),
    Key("logDir", "log_dir", _text, doc="Where the compaction worker's output goes (compaction.log)."),
    Key("authenticationEnabled", "authentication", _bool, doc="Clients must prove a role (Pulsar and admin HTTP)."),
    Key("authenticationProviders", "authentication_providers", _text,
        doc="Pulsar's provider class names (Token, Basic, Tls), comma-separated."),
    Key("tokenSecretKey", "token_secret_key", _text, doc="HS256 key: file:///path or data:;base64,..."),
    Key("tokenPublicKey", "token_public_key", _text, doc="RS256/ES256 public key: file:///path or data:;base64,..."),
    Key("tokenAuthClaim", "token_auth_claim", _text, doc="The token claim naming the role (default sub)."),
    Key("basicAuthConf", "basic_auth_conf", _text, doc="htpasswd file: file:///path or base64 data."),
    Key("anonymousUserRole", "anonymous_user_role", _text, doc="Role of clients without credentials."),
    Key("superUserRoles", "super_user_roles", _text, doc="Roles allowed everything, comma-separated."),
    Key("authenticationRefreshCheckSeconds", "authentication_refresh_check_seconds", _float,
        doc="Seconds between checks of connections' credential expiry."),
    Key("authorizationEnabled", "authorization", _bool, doc="Check roles' permissions (needs authentication)."),
    Key("authorizationAllowWildcardsMatching", "authorization_wildcards", _bool,
        doc="Grants to prefix* or *suffix roles hold for every role so named."),
    Key("authenticateMetricsEndpoint", "authenticate_metrics", _bool, doc="/metrics needs credentials too."),
)}

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
    "schemaRegistry", "exposeTopicLevelMetricsInPrometheus",
    "statusFilePath", "brokerDeduplication", "allowAutoSubscriptionCreation",
    "bootstrapNamespaces", "maxUnacked", "dispatch", "subscription",
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
