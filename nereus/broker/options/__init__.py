"""Every option of ``nereus broker`` and ``nereus standalone``, declared once.

One row of ``OPTIONS`` per option: its flag, the keys that set it in a ``--config`` file
(Pulsar's broker.conf names, KoP's or Kafka's, else Nereus' own), its click type,
default and help, the commands that have it, the ``BrokerOptions`` field it fills, how
the child brokers of ``standalone --brokers N`` are given it, and the name the runtime
configuration REST answer shows it under. The rest is derived from the rows:

- ``click_options(command)``: the command's click options, in the rows' order (``nereus.cli``);
- ``Option.parser``: a key's text to a value, from the option's type (``config_file.KEYS``);
- ``broker_fields(values)``: the option values as ``BrokerOptions`` fields; ``nereus.cli``
  builds the few made of several options (the Kafka listeners, SASL, Pulsar's advertised
  listeners) and checks the nested settings (authentication, TLS);
- ``child_args(values, index)``: the flags that give a child broker the standalone's values;
- ``runtime_names()``: the names ``/admin/v2/brokers/configuration/runtime`` shows.

Sans-io: nothing here reads a file or starts anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import click

from ...auth.providers import split_list

STANDALONE = "standalone"
BROKER = "broker"
BOTH = frozenset({STANDALONE, BROKER})

#: How the child brokers of ``standalone --brokers N`` are given an option of both commands.
PASSED = "passed"  # the standalone's value
SHIFTED = "shifted"  # a port: the standalone's plus the child's index (0, any free port, stays 0)
OWN = "own"  # not passed on: each broker has its own, or the standalone gives it otherwise

#: nereus.topics.partitioned.MAX_PARTITIONS, not imported here: that loads the whole broker.
PARTITION_CEILING = 10_000

PORT = click.IntRange(0, 65535)
SCHEMA_STRATEGIES = ("ALWAYS_INCOMPATIBLE", "ALWAYS_COMPATIBLE", "BACKWARD", "FORWARD", "FULL",
                     "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")


# -- a configuration key's text to a value (each raises ValueError with the reason) -----------------------

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


def parse_bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError("expected true or false")


def _text(text: str) -> str:
    if not text:
        raise ValueError("empty")
    return text


def _millis(text: str) -> float:
    """Kafka's and Pulsar's milliseconds, as the option's seconds."""
    return _float(text) / 1000.0


def _mechanisms(text: str) -> str:
    from ...kafka.server.security.sasl import parse_mechanisms

    return ",".join(parse_mechanisms(text))


class _CatalogUrl(click.ParamType):
    """An Iceberg catalog's URL: an SQLAlchemy URL or an Iceberg REST catalog's."""

    name = "URL"

    def convert(self, value, param, ctx):
        scheme, sep, rest = str(value).partition("://")
        if not sep or not scheme or " " in scheme or not rest.strip("/"):
            self.fail(f"{value!r} is no catalog URL: expected sqlite:///PATH, postgresql://..., or http(s)://... "
                      "(an Iceberg REST catalog)", param, ctx)
        return value


def _one_of(choice: click.Choice) -> Callable[[str], str]:
    """One of ``choice``'s values (in any case, where it ignores case)."""
    fold = (lambda text: text) if choice.case_sensitive else str.upper
    allowed = {fold(value) for value in choice.choices}
    expected = " or ".join(choice.choices) if len(choice.choices) == 2 else f"one of {', '.join(choice.choices)}"

    def parse(text: str) -> str:
        if fold(text) not in allowed:
            raise ValueError(f"expected {expected}")
        return text

    return parse


def _megabytes(mb: float) -> int:
    return max(1, int(mb * (1 << 20)))


def _param_of(flag: str) -> str:
    """click's parameter name of ``flag`` (``--no-x`` of a boolean aside)."""
    return flag.split("/")[0].lstrip("-").replace("-", "_")


@dataclass(frozen=True)
class Option:
    """One option of ``nereus broker`` and/or ``nereus standalone``."""

    flag: str  # "--http-port"; a boolean "--x/--no-x"
    keys: tuple[str, ...] = ()  # its --config keys: its name first, then other names it is read under
    type: click.ParamType | None = None  # None: text (a boolean flag: bool)
    default: object = None
    help: str | Mapping[str, str] | None = None  # a Mapping: by command
    commands: frozenset = BOTH
    # The BrokerOptions field it fills ("": the parameter's name; "tls.cert_file": a field of a nested
    # setting; None: none, the command's own). nereus.cli fills the fields made of several options
    # itself: kafka_port, sasl, advertised_listeners, internal_listener and bind_addresses.
    field: str | None = ""
    to_field: Callable[[object], object] | None = None  # the option's value as the field's
    parse: Callable[[str], object] | None = None  # a key's text to the option's value; default: by type
    children: str = PASSED  # PASSED, SHIFTED or OWN
    rest_by_key: bool = False  # the runtime configuration shows it under its first key, else its field camel-cased
    param: str = ""  # the click parameter (and --config value) name; default: the flag's

    def __post_init__(self) -> None:
        if not self.param:
            object.__setattr__(self, "param", _param_of(self.flag))
        if self.field == "":
            object.__setattr__(self, "field", self.param)

    @property
    def is_flag(self) -> bool:
        return "/" in self.flag

    @property
    def parser(self) -> Callable[[str], object]:
        """A configuration key's text to the option's value (the option's type then checks it as a flag's)."""
        if self.parse is not None:
            return self.parse
        if self.is_flag:
            return parse_bool
        if isinstance(self.type, click.Choice):
            return _one_of(self.type)
        if isinstance(self.type, click.types.IntParamType):
            return _int
        if isinstance(self.type, click.types.FloatParamType):
            return _float
        return _text

    def click_option(self, command: str):
        help_text = self.help.get(command) if isinstance(self.help, Mapping) else self.help
        named = [] if self.param == _param_of(self.flag) else [self.param]
        return click.option(self.flag, *named, type=self.type, default=self.default, help=help_text,
                            show_default=True if self.default is not None else None)

    def as_args(self, value: object, index: int = 0) -> list[str]:
        """The flags that give ``value`` to another broker process (child ``index`` of a standalone)."""
        if value is None:
            return []
        if self.is_flag:
            on, off = self.flag.split("/")
            return [on if value else off]
        if self.children == SHIFTED:
            value = value + index if value else 0
        return [self.flag, str(value)]


OPTIONS: tuple[Option, ...] = (
    # -- each command's own ------------------------------------------------------------------------
    Option("--data-dir", ("dataDir",), click.Path(file_okay=False, path_type=Path), Path("./data"),
           "Where the metadata engine and the local object store keep their files.",
           commands=frozenset({STANDALONE}), field=None),
    Option("--oxia-port", ("oxiaPort",), PORT, 6648, commands=frozenset({STANDALONE}), field=None),
    Option("--metadata", ("metadataStoreUrl",), help=(
        "The cluster's metadata service: oxia://host:port[/namespace], or oxia+tls://...[?trust=CA_FILE"
        "&cert=FILE&key=FILE] (required; or metadataStoreUrl)."), commands=frozenset({BROKER}), field=None),
    Option("--object-store", ("objectStoreUrl",), help={
        STANDALONE: "Object store URL (file://, s3://, memory://). Default: file://DATA_DIR/objects",
        BROKER: "The cluster's object store: s3://bucket/prefix?... or a file:// directory every broker shares "
                "(required; or objectStoreUrl)."}, field=None, children=OWN),
    Option("--object-store-timeout", ("objectStoreTimeoutSeconds",), click.FloatRange(0.1), 30,
           "Seconds an s3:// object store may take to answer the start-up check (a probe object written and "
           "deleted) before start-up gives up.", field=None),
    Option("--metadata-timeout", ("metadataStoreOperationTimeoutSeconds",), click.FloatRange(0.1), 30,
           "Seconds to keep retrying an unreachable metadata service before giving up.",
           commands=frozenset({BROKER}), field=None),
    Option("--metadata-shards", ("metadataShards",), click.IntRange(1, 256), 1,
           "Shards of a new metadata namespace (one fsync stream each; 1 suits a single machine).",
           commands=frozenset({STANDALONE}), field=None),
    Option("--brokers", ("numBrokers",), click.IntRange(1, 256), 1,
           "Broker processes to run (one core each); the others listen on the next ports up.",
           commands=frozenset({STANDALONE}), field=None),

    # -- every broker's ----------------------------------------------------------------------------
    Option("--config", (), click.Path(dir_okay=False, path_type=Path), None,
           "A Pulsar broker.conf / standalone.conf style file (key=value); flags override it.",
           param="config_file", field=None, children=OWN),
    Option("--bind", ("bindAddress",), None, "127.0.0.1", "Address the listeners bind to.", rest_by_key=True),
    Option("--http-port", ("webServicePort",), PORT, 8080, children=SHIFTED, rest_by_key=True),
    Option("--pulsar-port", ("brokerServicePort",), PORT, 6650, children=SHIFTED, rest_by_key=True),
    # The Kafka listeners are set by KoP's kafkaListeners key (one of config_file's compound keys).
    Option("--kafka-port", (), PORT, 9092, children=SHIFTED),
    Option("--kafka-plaintext/--no-kafka-plaintext", (), None, True,
           "The PLAINTEXT Kafka listener on --kafka-port (kafkaListeners without PLAINTEXT:// turns it off; "
           "another Kafka listener is then needed).", field=None),
    Option("--pulsar-tls-port", ("brokerServicePortTls",), PORT, None,
           "Pulsar over TLS (pulsar+ssl://; Pulsar's usual 6651). Default: none.", children=SHIFTED,
           rest_by_key=True),
    Option("--https-port", ("webServicePortTls",), PORT, None,
           "HTTPS admin REST API, lookup and metrics (Pulsar's usual 8443). Default: none.", field="http_tls_port",
           children=SHIFTED, rest_by_key=True),
    Option("--kafka-ssl-port", (), PORT, None, "Kafka SSL listener (security.protocol=SSL). Default: none.",
           children=SHIFTED),
    Option("--kafka-sasl-port", (), PORT, None,
           "Kafka SASL_PLAINTEXT listener (kafkaListeners' SASL_PLAINTEXT://). Default: none.", children=SHIFTED),
    Option("--kafka-sasl-ssl-port", (), PORT, None,
           "Kafka SASL_SSL listener (kafkaListeners' SASL_SSL://). Default: none.", children=SHIFTED),
    Option("--sasl-mechanisms", ("saslAllowedMechanisms",), None, "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
           "SASL mechanisms of the Kafka SASL listeners (saslAllowedMechanisms); OAUTHBEARER needs "
           "--token-secret-key or --token-public-key.", parse=_mechanisms, field="sasl", rest_by_key=True),
    Option("--tls-cert-file", ("tlsCertificateFilePath",), click.Path(dir_okay=False), None,
           "PEM certificate (chain) of every TLS listener (tlsCertificateFilePath).", field="tls.cert_file",
           rest_by_key=True),
    Option("--tls-key-file", ("tlsKeyFilePath",), click.Path(dir_okay=False), None,
           "PEM private key of --tls-cert-file (tlsKeyFilePath).", field="tls.key_file", rest_by_key=True),
    Option("--tls-trust-certs-file", ("tlsTrustCertsFilePath",), click.Path(dir_okay=False), None,
           "PEM CA certificates client certificates are verified against (tlsTrustCertsFilePath).",
           field="tls.trust_file", rest_by_key=True),
    Option("--tls-allow-insecure/--no-tls-allow-insecure", ("tlsAllowInsecureConnection",), None, False,
           "Ask TLS clients for no certificate (tlsAllowInsecureConnection).", field="tls.allow_insecure",
           rest_by_key=True),
    Option("--tls-require-client-cert/--no-tls-require-client-cert", ("tlsRequireTrustedClientCertOnConnect",),
           None, False, "Refuse TLS clients without a certificate signed by --tls-trust-certs-file "
           "(tlsRequireTrustedClientCertOnConnect).", field="tls.require_client_cert", rest_by_key=True),
    Option("--broker-client-tls/--no-broker-client-tls", ("brokerClientTlsEnabled",), None, False,
           "Brokers reach each other's WAL replicas over TLS with a client certificate (brokerClientTlsEnabled); "
           "this broker's WAL service then takes only clients with a certificate signed by "
           "--tls-trust-certs-file, and serves with --tls-cert-file.", rest_by_key=True),
    Option("--broker-client-cert-file", ("brokerClientCertificateFilePath",), click.Path(dir_okay=False), None,
           "PEM client certificate this broker shows other brokers' WAL services "
           "(brokerClientCertificateFilePath).", rest_by_key=True),
    Option("--broker-client-key-file", ("brokerClientKeyFilePath",), click.Path(dir_okay=False), None,
           "PEM private key of --broker-client-cert-file (brokerClientKeyFilePath).", rest_by_key=True),
    Option("--broker-client-trust-certs-file", ("brokerClientTrustCertsFilePath",), click.Path(dir_okay=False),
           None, "PEM CA certificates other brokers' WAL services are verified against "
           "(brokerClientTrustCertsFilePath; default: --tls-trust-certs-file).", rest_by_key=True),
    Option("--broker-client-auth-plugin", ("brokerClientAuthenticationPlugin",), None, None,
           "How this broker authenticates to other brokers' WAL services: "
           "org.apache.pulsar.client.impl.auth.AuthenticationToken (brokerClientAuthenticationPlugin).",
           rest_by_key=True),
    Option("--broker-client-auth-params", ("brokerClientAuthenticationParameters",), None, None,
           "This broker's credentials for other brokers' WAL services: token:<jwt>, file:///path or "
           '{"token": ...} (brokerClientAuthenticationParameters); with --authentication and no '
           "--broker-client-tls, WAL services take only a superuser's token.", rest_by_key=True),
    Option("--tls-offload-processes", ("tlsOffloadProcesses",), click.IntRange(0, 64), 0,
           "Worker processes that end TLS of the Pulsar and Kafka TLS listeners and relay plaintext to the "
           "broker, on other cores (tlsOffloadProcesses; 0: TLS in the broker).", rest_by_key=True),
    Option("--advertised-address", ("advertisedAddress",), None, None,
           "Host name clients are told to use (default: the bind address).", rest_by_key=True),
    # Pulsar's advertised listeners: one broker's addresses (a standalone with children refuses them).
    Option("--advertised-listeners", ("advertisedListeners",), None, None,
           "Pulsar's advertised listeners, name:pulsar://host:port (or pulsar+ssl://, http://, https://)[,...]: "
           "a client's listener_name picks the URL its lookups answer (advertising binds nothing; see "
           "--bind-addresses).", children=OWN, rest_by_key=True),
    Option("--internal-listener-name", ("internalListenerName",), None, None,
           "The advertised listener brokers and clients naming none use (default: the first).",
           field="internal_listener", children=OWN, rest_by_key=True),
    Option("--bind-addresses", ("bindAddresses",), None, None,
           "More Pulsar ports to listen on, listener:pulsar://host:port[,...]; a client connected there and "
           "naming no listener gets that listener's URLs.", children=OWN, rest_by_key=True),
    Option("--cluster-name", ("clusterName",), None, "standalone", "Name of the cluster.", rest_by_key=True),
    Option("--zone", ("availabilityZone",), None, "default", "Availability zone (Kafka rack) of this broker."),
    Option("--broker-name", ("brokerName",), None, None,
           "Stable name of this broker (keeps its Kafka node id). Default: address and ports.", children=OWN),
    Option("--auto-topic-creation/--no-auto-topic-creation", ("allowAutoTopicCreation",), None, True,
           "Missing topics are created on first use (inside existing namespaces; a namespace's "
           "autoTopicCreation policy overrides this).", rest_by_key=True),
    Option("--auto-topic-creation-type", ("allowAutoTopicCreationType",),
           click.Choice(["non-partitioned", "partitioned"]), "non-partitioned",
           "What a Pulsar client's first use of a missing topic creates.", rest_by_key=True),
    Option("--default-partitions", ("defaultNumPartitions", "num.partitions"), click.IntRange(1, PARTITION_CEILING),
           1, "Partitions of an auto-created partitioned topic (and of a Kafka topic created without a count).",
           rest_by_key=True),
    Option("--max-num-partitions-per-partitioned-topic", ("maxNumPartitionsPerPartitionedTopic",),
           click.IntRange(0, PARTITION_CEILING), 0,
           "Most partitions a topic may be created with or grown to, by the admin REST API, a Kafka client or "
           f"auto-creation (maxNumPartitionsPerPartitionedTopic; 0: {PARTITION_CEILING}, the most Nereus creates "
           "for one topic).", field="max_partitions_per_topic", rest_by_key=True),
    Option("--max-replication-factor", ("maxReplicationFactor",), click.IntRange(1, 32767), 32,
           "Largest replication factor a Kafka client may create a topic with. Any factor up to it is accepted "
           "whatever the number of brokers: durability is the object store's, and Metadata lists live brokers as "
           "the replicas.", rest_by_key=True),
    Option("--schema-compatibility-strategy", ("schemaCompatibilityStrategy",),
           click.Choice(SCHEMA_STRATEGIES, case_sensitive=False), "FULL",
           "Schema compatibility of namespaces and topics without a policy of their own "
           "(schemaCompatibilityStrategy).", to_field=str.upper, rest_by_key=True),
    Option("--deduplication/--no-deduplication", ("brokerDeduplicationEnabled",), None, True,
           "Message deduplication of namespaces without a policy of their own.", rest_by_key=True),
    Option("--default-retention-minutes", ("defaultRetentionTimeInMinutes",), click.IntRange(-1), -1,
           "Retention time of namespaces without a retention policy (defaultRetentionTimeInMinutes; -1: "
           "unlimited). Acknowledged messages older than this are deleted.", rest_by_key=True),
    Option("--default-retention-mb", ("defaultRetentionSizeInMB",), click.IntRange(-1), -1,
           "Retention size of namespaces without a retention policy (defaultRetentionSizeInMB; -1: unlimited).",
           rest_by_key=True),
    Option("--max-message-size", ("maxMessageSize",), click.IntRange(1024, 1 << 30), None,
           "Largest message in bytes (default: 5 MB for Pulsar, 8 MB for a Kafka batch).", rest_by_key=True),
    Option("--max-connections-per-ip", ("maxConnectionsPerIp",), click.IntRange(0), 0,
           "Open connections one client address may have per protocol, Pulsar and Kafka (maxConnectionsPerIp; "
           "0: unlimited); more are closed as they are accepted.", rest_by_key=True),
    Option("--max-connection-creation-rate", ("max.connection.creation.rate",), click.FloatRange(0), 0,
           "New Kafka connections a second over all client addresses (max.connection.creation.rate; 0: "
           "unlimited); one over it waits to be served."),
    Option("--frame-read-timeout", ("frameReadTimeoutSeconds",), click.FloatRange(0.1), 30,
           "Seconds a Pulsar or Kafka frame may take to arrive whole once its first bytes came; a slower "
           "connection is closed (slow-loris guard)."),
    Option("--max-pending-bytes-per-connection", ("maxPendingBytesPerConnection",), click.IntRange(1 << 16),
           16 << 20, "Bytes of requests one connection may have waiting for answers; its socket is not read "
           "beyond that (back-pressure).", field="max_pending_bytes"),
    Option("--max-pending-bytes-per-broker", ("maxPendingBytesPerBroker",), click.IntRange(1 << 16), 256 << 20,
           "Bytes of requests all Pulsar and Kafka connections together may have waiting for answers; past it, "
           "connections are not read until half of it is answered."),
    Option("--max-pending-publish-requests-per-connection", ("maxPendingPublishRequestsPerConnection",),
           click.IntRange(1), 1000, "Pulsar SENDs one connection may have waiting for storage before its socket "
           "is not read (maxPendingPublishRequestsPerConnection).", field="max_pending_publish_requests"),
    Option("--consumer-group-heartbeat-interval", ("group.consumer.heartbeat.interval.ms",), click.FloatRange(0.1),
           2, "Seconds between a KIP-848 consumer's heartbeats, told to it in every answer "
           "(group.consumer.heartbeat.interval.ms; Kafka's default is 5).", parse=_millis,
           field="consumer_heartbeat_interval"),
    Option("--consumer-group-session-timeout", ("group.consumer.session.timeout.ms",), click.FloatRange(0.5), 45,
           "Seconds after which a KIP-848 consumer that stopped heartbeating leaves its group "
           "(group.consumer.session.timeout.ms).", parse=_millis, field="consumer_session_timeout"),
    Option("--share-record-lock-duration", ("group.share.record.lock.duration.ms",), click.FloatRange(0.1, 3600),
           30, "Seconds a share consumer holds a record it acquired before another member may get it "
           "(group.share.record.lock.duration.ms; a group's share.record.lock.duration.ms overrides it).",
           parse=_millis),
    Option("--share-delivery-count-limit", ("group.share.delivery.count.limit",), click.IntRange(2, 10), 5,
           "Deliveries of a record to share consumers before its share group archives it "
           "(group.share.delivery.count.limit; a group's share.delivery.count.limit overrides it)."),
    Option("--share-partition-max-record-locks", ("group.share.partition.max.record.locks",),
           click.IntRange(1, 10_000), 2000, "Records of one share-partition its consumers may hold at once "
           "(group.share.partition.max.record.locks)."),
    Option("--transactional-id-expiration", ("transactional.id.expiration.ms",), click.FloatRange(1),
           7 * 24 * 3600, "Seconds after which a Kafka transactional id without an open transaction is "
           "forgotten (transactional.id.expiration.ms).", parse=_millis),
    Option("--topic-idle-seconds", ("topicIdleSeconds",), click.FloatRange(0), 300,
           "Seconds a loaded topic with no producer, consumer or reader attached and no append stays loaded; "
           "then it is unloaded and its memory given back (0: never unloaded)."),
    Option("--expose-topic-level-metrics/--no-expose-topic-level-metrics", ("exposeTopicLevelMetricsInPrometheus",),
           None, True, "Metrics per topic (label topic); off: summed per namespace (label namespace)."),
    Option("--topic-level-metrics-max-topics", ("topicLevelMetricsMaxTopics",), click.IntRange(0), 10_000,
           "Loaded topics above which metrics are summed per namespace even with --expose-topic-level-metrics, "
           "so a scrape stays small (0: no limit)."),
    Option("--session-timeout", ("metadataStoreSessionTimeoutMillis",), click.FloatRange(0.5), 10,
           "Seconds after which a broker that stopped heartbeating loses its topics.", parse=_millis),
    Option("--gc-interval", ("gcIntervalSeconds",), click.FloatRange(0.1), 30,
           "Seconds between garbage collection passes."),
    Option("--gc-grace", ("gcGraceSeconds",), click.FloatRange(0), 60,
           "Seconds a released object is kept for readers that resolved it just before."),
    # At least twice a WAL writer's name reservation life (10 s): a shorter timeout
    # would let the collector resolve the names of a live writer.
    Option("--gc-pending-timeout", ("gcPendingTimeoutSeconds",), click.FloatRange(20), 60,
           "Seconds after which an unfinished write (a writer or compactor that died) is resolved (at least 20)."),
    Option("--wal-profile", ("walProfile",), click.Choice(("object", "replicated", "local")), "object",
           "Where acknowledged writes of namespaces without a persistence policy live until they are in the "
           "object store: object (written there before the ack), replicated (the WALs of several brokers' disks, "
           "managedLedgerDefault* quorums), local (this broker's disk only)."),
    Option("--wal-dir", ("walDir",), click.Path(file_okay=False, path_type=Path), None, {
        STANDALONE: "Directory of this broker's WAL replica. Default: DATA_DIR/wal",
        BROKER: "Directory of this broker's WAL replica (the bookie role; needed by the local profile). "
                "Without it, this broker holds no WAL replica (its writes may still go to others')."},
           children=OWN),
    Option("--wal-port", ("bookiePort",), PORT, 0,
           "Port of this broker's WAL replica service (0: any free port; brokers find it in the registry).",
           children=SHIFTED),
    Option("--wal-max-mb", ("walMaxSizeMB",), click.FloatRange(1), 8192,
           "Disk space this broker's WAL replica may use; beyond it, writes go to other replicas or fail.",
           field="wal_max_bytes", to_field=_megabytes),
    Option("--wal-max-unuploaded-mb", ("walMaxUnuploadedMB",), click.FloatRange(1), 1024,
           "Acknowledged WAL writes not yet in the object store beyond which producers wait (back-pressure).",
           field="wal_max_unuploaded_bytes", to_field=_megabytes),
    Option("--wal-upload-group-ms", ("walUploadGroupMs",), click.FloatRange(0), 500,
           "WAL writes of this many milliseconds go to the object store as one object (one PUT however many "
           "flushes; 0: an object per flush).", field="wal_upload_group_seconds", to_field=lambda ms: ms / 1000),
    Option("--wal-ensemble", ("managedLedgerDefaultEnsembleSize",), click.IntRange(1, 32), 2,
           "WAL replicas of a block of writes, for namespaces without a persistence policy (replicated profile)."),
    Option("--wal-write-quorum", ("managedLedgerDefaultWriteQuorum",), click.IntRange(1, 32), 2,
           "WAL replicas each write goes to (at most the ensemble)."),
    Option("--wal-ack-quorum", ("managedLedgerDefaultAckQuorum",), click.IntRange(1, 32), 2,
           "WAL replicas that must have a write on disk before it is acknowledged (at most the write quorum)."),
    Option("--compaction-interval", ("compactionIntervalSeconds",), click.FloatRange(0), 2,
           "Seconds between compaction runs (a Spark worker process; 0: no compaction schedule)."),
    Option("--compaction-max-age", ("compactionMaxAgeSeconds",), click.FloatRange(0), 2,
           "Compact a stream's newest records once the oldest of them is this many seconds old ..."),
    Option("--compaction-min-mb", ("compactionMinMB",), click.FloatRange(0), 8,
           "... or once there are this many MB of them.", field="compaction_min_bytes", to_field=_megabytes),
    Option("--compaction-monitor-interval", ("brokerServiceCompactionMonitorIntervalInSeconds",),
           click.FloatRange(0), 60, "Seconds between checks of the topics' compactionThreshold policies (0: none)."),
    Option("--authentication/--no-authentication", ("authenticationEnabled",), None, False,
           "Clients must authenticate (authenticationEnabled).", field="authentication.enabled", rest_by_key=True),
    Option("--authentication-providers", ("authenticationProviders",), None, None,
           "Comma-separated Pulsar provider class names (AuthenticationProviderToken, AuthenticationProviderBasic, "
           "AuthenticationProviderTls) or token, basic, tls.", field="authentication.providers",
           to_field=split_list, rest_by_key=True),
    Option("--token-secret-key", ("tokenSecretKey",), None, None,
           "Token HMAC key: file:///path or data:;base64,...", field="authentication.token_secret_key",
           rest_by_key=True),
    Option("--token-public-key", ("tokenPublicKey",), None, None,
           "Token RSA/EC public key: file:///path or data:...", field="authentication.token_public_key",
           rest_by_key=True),
    Option("--token-auth-claim", ("tokenAuthClaim",), None, "sub", "Token claim naming the role.",
           field="authentication.token_auth_claim", rest_by_key=True),
    Option("--basic-auth-conf", ("basicAuthConf",), None, None, "htpasswd file (file:///path) or its base64 data.",
           field="authentication.basic_auth_conf", rest_by_key=True),
    Option("--anonymous-user-role", ("anonymousUserRole",), None, None, "Role of clients that give no credentials.",
           field="authentication.anonymous_user_role", rest_by_key=True),
    Option("--super-user-roles", ("superUserRoles",), None, None, "Comma-separated roles allowed everything.",
           field="authentication.super_user_roles", to_field=split_list, rest_by_key=True),
    Option("--authentication-refresh-check-seconds", ("authenticationRefreshCheckSeconds",), click.FloatRange(0.1),
           60, "Seconds between checks of live connections' credential expiry.",
           field="authentication.refresh_check_seconds", rest_by_key=True),
    Option("--authenticate-metrics/--no-authenticate-metrics", ("authenticateMetricsEndpoint",), None, False,
           "/metrics needs credentials too (authenticateMetricsEndpoint).",
           field="authentication.authenticate_metrics", rest_by_key=True),
    Option("--authorization/--no-authorization", ("authorizationEnabled",), None, False,
           "Check roles' permissions: superusers, tenant admins, namespace and topic grants (authorizationEnabled).",
           field="authentication.authorization_enabled", rest_by_key=True),
    Option("--authorization-wildcards/--no-authorization-wildcards", ("authorizationAllowWildcardsMatching",),
           None, False, "Grants to prefix* or *suffix roles hold for every role so named "
           "(authorizationAllowWildcardsMatching).", field="authentication.authorization_wildcards",
           rest_by_key=True),
    Option("--log-dir", ("logDir",), click.Path(file_okay=False, path_type=Path), None,
           "Where the compaction worker's output goes (compaction.log). Default: DATA_DIR/logs (standalone), "
           "./logs (broker)."),
    Option("--sbt-catalog", ("sbtCatalogUri",), _CatalogUrl(), None,
           "The Iceberg catalog of the topics' built-in tables: an SQLAlchemy URL (sqlite:///PATH, "
           "postgresql://...) or an Iceberg REST catalog's URL. Default: iceberg/catalog.db beside a file:// object "
           "store, DATA_DIR/iceberg/catalog.db for a standalone on another store; a broker on another store "
           "compacts without tables.", field="sbt_catalog_uri"),
)

def click_options(command: str):
    """A decorator giving a click command the options ``command`` has, in the rows' order."""
    def decorate(function):
        for option in reversed([o for o in OPTIONS if command in o.commands]):
            function = option.click_option(command)(function)
        return function

    return decorate


def broker_fields(values: Mapping[str, object]) -> dict[str, object]:
    """``BrokerOptions`` fields of the option values ``values`` (a nested setting's as a dict of its fields)."""
    fields: dict[str, object] = {}
    for option in OPTIONS:
        if option.field is None or option.param not in values:
            continue
        value = values[option.param]
        if option.to_field is not None:
            value = option.to_field(value)
        group, _, name = option.field.rpartition(".")
        (fields.setdefault(group, {}) if group else fields)[name] = value
    return fields


def child_args(values: Mapping[str, object], index: int) -> list[str]:
    """The flags that give child broker ``index`` of a standalone the standalone's option values."""
    args: list[str] = []
    for option in OPTIONS:
        if option.commands == BOTH and option.children != OWN:
            args += option.as_args(values.get(option.param), index)
    return args


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def runtime_names() -> dict[str, str]:
    """The name the runtime configuration shows each ``BrokerOptions`` field under (``tls.cert_file`` for a
    nested one's); a field no option fills is shown camel-cased."""
    return {option.field: option.keys[0] if option.rest_by_key else camel(option.field.rpartition(".")[2])
            for option in OPTIONS if option.field is not None}


__all__ = ["BOTH", "BROKER", "OPTIONS", "OWN", "PARTITION_CEILING", "PASSED", "SHIFTED", "STANDALONE",
           "Option", "broker_fields", "camel", "child_args", "click_options", "parse_bool", "runtime_names"]
