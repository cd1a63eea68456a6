"""Kafka's topic and broker config names: types, defaults, checks and synonyms (sans-io).

A topic config not set on the topic takes its broker synonym's value (per-broker
dynamic, then cluster-wide dynamic, then the broker's static options), else its
default, as Kafka resolves it. ``validate`` answers a ``ConfigError`` naming the
config and why, which the handlers send as INVALID_CONFIG.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

# DescribeConfigs config sources and types (Kafka's ConfigSource / ConfigType ids).
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 4, 5
GROUP_CONFIG = 8
TYPE_IDS = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
            "password": 9}
INT_MAX, LONG_MAX = (1 << 31) - 1, (1 << 63) - 1
LONG_MAX_S = str(LONG_MAX)


class ConfigError(ValueError):
    """A config name or value Kafka would refuse."""


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One config: its type, default, the allowed values and what it means."""

    name: str
    type: str
    default: str
    doc: str
    synonym: str | None = None  # the broker config that gives its default
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    check: Callable[[str], str | None] | None = None  # extra rule: an error message or None
    dynamic: bool = True  # (broker configs) alterable at run time

    @property
    def type_id(self) -> int:
        return TYPE_IDS[self.type]


def _list_items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def _cleanup_policy(value: str) -> str | None:
    items = _list_items(value)  # empty: neither (records are kept, never compacted), as Kafka allows
    bad = [i for i in items if i not in ("delete", "compact")]
    return f"{bad[0]!r} is not one of delete, compact" if bad else None


def _gzip_level(value: str) -> str | None:
    return None if int(value) == -1 or 1 <= int(value) <= 9 else "it must be -1 or between 1 and 9"


_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_DEPRECATED_IGNORED = "Deprecated since Kafka {0}; accepted, stored and described, and ignored here: {1}."

#: The releases whose names message.format.version takes (Kafka's MetadataVersion, 0.8.0 to 3.9).
_FORMAT_RELEASES = {(0, 8), (0, 9), (0, 10), (0, 11), (1, 0), (1, 1)} | {(2, m) for m in range(9)} \
    | {(3, m) for m in range(10)}


def _message_format_version(value: str) -> str | None:
    version, _, iv = value.partition("-IV")
    parts = version.split(".")  # 0.10.0.0 names 0.10.0, as Kafka reads it
    ok = 2 <= len(parts) <= 4 and all(p.isdigit() for p in parts) and (not iv or iv.isdigit()) \
        and (int(parts[0]), int(parts[1])) in _FORMAT_RELEASES
    return None if ok else "it must name a Kafka release, such as 2.8 or 3.0-IV1"


def _topic(name, type_, default, doc, synonym=None, **kw) -> ConfigDef:
    return ConfigDef(name, type_, default, doc, synonym, **kw)


TOPIC_DEFS: dict[str, ConfigDef] = {d.name: d for d in (
    _topic("cleanup.policy", "list", "delete", "delete (retention), compact (latest record per key), both, or "
           "empty (neither: records are kept).",
           "log.cleanup.policy", check=_cleanup_policy),
    _topic("compression.type", "string", "producer", "The compression of stored batches; producer keeps the "
           "producer's.", "compression.type", choices=_COMPRESSION),
    _topic("compression.gzip.level", "int", "-1", "The gzip level when compression.type is gzip.",
           "compression.gzip.level", check=_gzip_level),
    _topic("compression.lz4.level", "int", "9", "The lz4 level when compression.type is lz4.",
           "compression.lz4.level", low=1, high=17),
    _topic("compression.zstd.level", "int", "3", "The zstd level when compression.type is zstd.",
           "compression.zstd.level", low=-131072, high=22),
    _topic("delete.retention.ms", "long", "86400000", "How long tombstones are kept on a compacted topic.",
           "log.cleaner.delete.retention.ms", low=0),
    _topic("file.delete.delay.ms", "long", "60000", "Kept for compatibility (storage deletes objects by GC).",
           "log.segment.delete.delay.ms", low=0),
    _topic("flush.messages", "long", LONG_MAX_S, "Kept for compatibility (every acknowledged write is durable).",
           "log.flush.interval.messages", low=1),
    _topic("flush.ms", "long", LONG_MAX_S, "Kept for compatibility (every acknowledged write is durable).",
           "log.flush.interval.ms", low=0),
    _topic("follower.replication.throttled.replicas", "list", "", "Kept for compatibility.",
           "follower.replication.throttled.replicas"),
    _topic("index.interval.bytes", "int", "4096", "Kept for compatibility.", "log.index.interval.bytes", low=0),
    _topic("leader.replication.throttled.replicas", "list", "", "Kept for compatibility.",
           "leader.replication.throttled.replicas"),
    _topic("local.retention.bytes", "long", "-2", "Kept for compatibility.", "log.local.retention.bytes", low=-2),
    _topic("local.retention.ms", "long", "-2", "Kept for compatibility.", "log.local.retention.ms", low=-2),
    _topic("max.compaction.lag.ms", "long", LONG_MAX_S, "The longest a record stays uncompacted.",
           "log.cleaner.max.compaction.lag.ms", low=1),
    _topic("max.message.bytes", "int", "1048588", "The largest record batch a producer may send.",
           "message.max.bytes", low=0),
    _topic("message.downconversion.enable", "boolean", "true", _DEPRECATED_IGNORED.format(
           "3.0", "records are served in the format they were written, to clients that all read it"),
           "log.message.downconversion.enable"),
    _topic("message.format.version", "string", "3.0-IV1", _DEPRECATED_IGNORED.format(
           "3.0", "batches are always stored in record format v2"), "log.message.format.version",
           check=_message_format_version),
    _topic("message.timestamp.after.max.ms", "long", LONG_MAX_S, "How far ahead of the broker's clock a "
           "CreateTime timestamp may be; a batch with a record beyond it is refused (INVALID_TIMESTAMP).",
           "log.message.timestamp.after.max.ms", low=0),
    _topic("message.timestamp.before.max.ms", "long", LONG_MAX_S, "How far behind the broker's clock a "
           "CreateTime timestamp may be; a batch with a record beyond it is refused (INVALID_TIMESTAMP).",
           "log.message.timestamp.before.max.ms", low=0),
    _topic("message.timestamp.difference.max.ms", "long", LONG_MAX_S, "Deprecated since Kafka 3.6: the "
           "before and after bounds while they have their defaults.",
           "log.message.timestamp.difference.max.ms", low=0),
    _topic("message.timestamp.type", "string", "CreateTime", "CreateTime keeps the producer's timestamps; "
           "LogAppendTime stamps each batch with the broker's append time.", "log.message.timestamp.type",
           choices=("CreateTime", "LogAppendTime")),
    _topic("min.cleanable.dirty.ratio", "double", "0.5", "How much of a compacted topic may be uncompacted.",
           "log.cleaner.min.cleanable.ratio", low=0, high=1),
    _topic("min.compaction.lag.ms", "long", "0", "The least time a record stays uncompacted.",
           "log.cleaner.min.compaction.lag.ms", low=0),
    _topic("min.insync.replicas", "int", "1", "Kept for compatibility (the object store replicates).",
           "min.insync.replicas", low=1),
    _topic("preallocate", "boolean", "false", "Kept for compatibility.", "log.preallocate"),
    _topic("remote.log.copy.disable", "boolean", "false", "Accepted and stored; ignored (there is no local "
           "tier to copy from).", "remote.log.copy.disable"),
    _topic("remote.log.delete.on.disable", "boolean", "false", "Accepted and stored; ignored (there is no local "
           "tier).", "remote.log.delete.on.disable"),
    _topic("remote.storage.enable", "boolean", "false", "Kept for compatibility (all storage is remote).",
           "remote.log.storage.system.enable"),
    _topic("retention.bytes", "long", "-1", "Records beyond this many bytes are deleted, oldest first "
           "(-1: no limit).", "log.retention.bytes", low=-1),
    _topic("retention.ms", "long", "-1", "Records older than this are deleted (-1: kept for ever).",
           "log.retention.ms", low=-1),
    _topic("segment.bytes", "int", "1073741824", "Kept for compatibility.", "log.segment.bytes", low=14),
    _topic("segment.index.bytes", "int", "10485760", "Kept for compatibility.", "log.index.size.max.bytes", low=4),
    _topic("segment.jitter.ms", "long", "0", "Kept for compatibility.", "log.roll.jitter.ms", low=0),
    _topic("segment.ms", "long", "604800000", "Kept for compatibility.", "log.roll.ms", low=1),
    _topic("unclean.leader.election.enable", "boolean", "false", "Kept for compatibility.",
           "unclean.leader.election.enable"),
)}

# Broker configs: every topic config's synonym (dynamic, as in Kafka) and the broker's own.
BROKER_DEFS: dict[str, ConfigDef] = {
    d.synonym: ConfigDef(d.synonym, d.type, d.default, d.doc, None, d.low, d.high, d.choices, d.check)
    for d in TOPIC_DEFS.values()}
BROKER_DEFS.update({d.name: d for d in (
    ConfigDef("auto.create.topics.enable", "boolean", "true", "Topics are created on first use.", dynamic=False),
    ConfigDef("num.partitions", "int", "1", "Partitions of an auto-created topic.", low=1, dynamic=False),
    ConfigDef("default.replication.factor", "int", "1", "Replicas reported for a topic created without one.",
              low=1, dynamic=False),
    ConfigDef("offsets.topic.replication.factor", "short", "1", "Kept for compatibility.", low=1, dynamic=False),
    ConfigDef("advertised.listeners", "list", "", "The listeners this broker tells clients to connect to "
              "(security protocol://host:port, one per Kafka listener).", dynamic=False),
    ConfigDef("node.id", "int", "0", "This broker's node id.", dynamic=False),
    ConfigDef("broker.id", "int", "0", "This broker's node id.", dynamic=False),
    # Kafka's per-broker dynamic configs about what a Nereus broker does not have (Kerberos logins,
    # I/O and replica fetcher threads, a log cleaner): accepted, stored and described, as tools set them.
    *(ConfigDef(name, type_, default, f"Accepted, stored and described; no effect here: {why}.", low=low)
      for name, type_, default, low, why in (
          ("sasl.kerberos.min.time.before.relogin", "long", "60000", 0, "no Kerberos (GSSAPI) login"),
          ("sasl.kerberos.ticket.renew.window.factor", "double", "0.8", None, "no Kerberos (GSSAPI) login"),
          ("sasl.kerberos.ticket.renew.jitter", "double", "0.05", None, "no Kerberos (GSSAPI) login"),
          ("num.io.threads", "int", "8", 1, "requests run on the broker's event loop"),
          ("num.network.threads", "int", "3", 1, "connections run on the broker's event loop"),
          ("num.replica.fetchers", "int", "1", 1, "replicas read the shared storage, nothing is fetched"),
          ("background.threads", "int", "10", 1, "background work runs on the broker's event loop"),
          ("log.cleaner.threads", "int", "1", 0, "compaction runs as its own scheduled job"))),
    # KIP-848 consumer groups: the broker's options (--consumer-group-session-timeout, ...) set them
    ConfigDef("group.consumer.session.timeout.ms", "int", "45000",
              "A consumer-protocol group member silent this long leaves its group.", low=500, dynamic=False),
    ConfigDef("group.consumer.heartbeat.interval.ms", "int", "5000",
              "How often consumer-protocol group members heartbeat.", low=100, dynamic=False),
    # share groups (KIP-932); a lock shorter than Kafka's 15 s floor is allowed, for tests
    ConfigDef("group.share.record.lock.duration.ms", "int", "30000",
              "How long a share consumer holds a record it acquired.", low=100, high=3_600_000),
    ConfigDef("group.share.delivery.count.limit", "int", "5",
              "Deliveries of a record before its share group archives it.", low=2, high=10),
    ConfigDef("group.share.partition.max.record.locks", "int", "2000",
              "Records of one share-partition acquired at the same time.", low=1, high=10_000),
)})


# Group configs (Kafka's GroupConfig, for share groups); each defaults to its broker synonym.
GROUP_DEFS: dict[str, ConfigDef] = {d.name: d for d in (
    ConfigDef("consumer.session.timeout.ms", "int", "45000", "A member of this consumer group (group.protocol="
              "consumer) silent this long leaves it.", "group.consumer.session.timeout.ms", low=1000, high=3_600_000),
    ConfigDef("consumer.heartbeat.interval.ms", "int", "5000", "How often members of this consumer group are told "
              "to heartbeat.", "group.consumer.heartbeat.interval.ms", low=100, high=3_600_000),
    ConfigDef("share.auto.offset.reset", "string", "latest",
              "Where a share group with no position on a partition starts.", choices=("latest", "earliest")),
    ConfigDef("share.isolation.level", "string", "read_uncommitted",
              "read_committed: the group gets only committed transactional records (none past the last stable "
              "offset); read_uncommitted: every record.", choices=("read_committed", "read_uncommitted")),
    ConfigDef("share.record.lock.duration.ms", "int", "30000",
              "How long a share consumer holds a record it acquired.", "group.share.record.lock.duration.ms",
              low=100, high=3_600_000),
    ConfigDef("share.delivery.count.limit", "int", "5",
              "Deliveries of a record before its share group archives it.", "group.share.delivery.count.limit",
              low=2, high=10),
)}


def validate(defs: dict[str, ConfigDef], name: str, value: str | None, kind: str = "topic") -> str:
    """The value normalised as Kafka stores it; ConfigError when the name or value is not valid."""
    d = defs.get(name)
    if d is None:
        raise ConfigError(f"Unknown {kind} config name: {name}")
    if value is None:
        raise ConfigError(f"Null value not supported for {kind} config {name}")
    value = value.strip() if d.type != "password" else value
    try:
        number = _parse(d.type, value)
    except ValueError:
        raise ConfigError(f"Invalid value {value} for configuration {name}: not a valid {d.type}") from None
    if d.low is not None and number < d.low or d.high is not None and number > d.high:
        bound = f"at least {d.low:g}" if d.high is None else f"between {d.low:g} and {d.high:g}"
        raise ConfigError(f"Invalid value {value} for configuration {name}: it must be {bound}")
    if d.choices and value not in d.choices:
        raise ConfigError(f"Invalid value {value} for configuration {name}: String must be one of: "
                          + ", ".join(d.choices))
    problem = d.check(value) if d.check is not None else None
    if problem:
        raise ConfigError(f"Invalid value {value} for configuration {name}: {problem}")
    if d.type == "list":
        return ",".join(_list_items(value))
    if d.type == "boolean":
        return value.lower()
    return value


def _parse(type_: str, value: str):
    if type_ == "boolean":
        if value.lower() not in ("true", "false"):
            raise ValueError(value)
        return 0
    if type_ in ("int", "short", "long"):
        number = int(value)
        limit = {"int": INT_MAX, "short": (1 << 15) - 1, "long": LONG_MAX}[type_]
        if not -limit - 1 <= number <= limit:
            raise ValueError(value)
        return number
    if type_ == "double":
        return float(value)
    return 0


def list_items(value: str) -> list[str]:
    """The items of a list config's value."""
    return _list_items(value)


@dataclass(frozen=True, slots=True)
class Resolved:
    """A config in force: its value and source, and the values under it (Kafka's synonyms), best first."""

    name: str
    value: str
    source: int
    synonyms: tuple[tuple[str, str, int], ...]  # (name, value, source)


def _default_last(chain: list, name: str, default: str) -> None:
    """End ``chain`` with the default, unless a layer gave the broker's own (a DEFAULT_CONFIG layer)."""
    if not chain or chain[-1][2] != DEFAULT_CONFIG:
        chain.append((name, default, DEFAULT_CONFIG))


def resolve_topic(topic_set: dict[str, str], broker_layers: list[tuple[int, dict[str, str]]]) -> dict[str, Resolved]:
    """Every topic config as in force: set on the topic, else from the broker layers, else the default.

    ``broker_layers``: ``(source, {broker config name: value})`` best first.
    """
    out = {}
    for name, d in TOPIC_DEFS.items():
        chain = []
        if name in topic_set:
            chain.append((name, topic_set[name], DYNAMIC_TOPIC_CONFIG))
        for source, values in broker_layers:
            if d.synonym in values:
                chain.append((d.synonym, values[d.synonym], source))
        _default_last(chain, d.synonym or name, d.default)
        out[name] = Resolved(name, chain[0][1], chain[0][2], tuple(chain))
    return out


def resolve_group(group_set: dict[str, str], broker_layers: list[tuple[int, dict[str, str]]]) -> dict[str, Resolved]:
    """Every group config as in force: set on the group, else from its broker synonym, else the default."""
    out = {}
    for name, d in GROUP_DEFS.items():
        chain = [(name, group_set[name], GROUP_CONFIG)] if name in group_set else []
        chain += [(d.synonym, values[d.synonym], source) for source, values in broker_layers
                  if d.synonym and d.synonym in values]
        _default_last(chain, d.synonym or name, d.default)
        out[name] = Resolved(name, chain[0][1], chain[0][2], tuple(chain))
    return out


def resolve_broker(broker_layers: list[tuple[int, dict[str, str]]]) -> dict[str, Resolved]:
    """Every broker config as in force, from the layers (best first), else its default."""
    out = {}
    for name, d in BROKER_DEFS.items():
        chain = [(name, values[name], source) for source, values in broker_layers if name in values]
        _default_last(chain, name, d.default)
        out[name] = Resolved(name, chain[0][1], chain[0][2], tuple(chain))
    return out


__all__ = ["BROKER_DEFS", "ConfigDef", "ConfigError", "DEFAULT_CONFIG", "DYNAMIC_BROKER_CONFIG",
           "DYNAMIC_DEFAULT_BROKER_CONFIG", "DYNAMIC_TOPIC_CONFIG", "GROUP_CONFIG", "GROUP_DEFS", "Resolved",
           "STATIC_BROKER_CONFIG", "TOPIC_DEFS", "list_items", "resolve_broker", "resolve_group", "resolve_topic",
           "validate"]
