"""The options of `nereus standalone` and `nereus broker` made into ``BrokerOptions``: the --config
file's keys under the flags, and the settings made of several options, each checked before anything starts."""

from __future__ import annotations

import logging
from pathlib import Path

import click

from ..broker.options import broker_fields

def apply_config(command: str, kwargs: dict) -> None:
    """Fill the options the command line did not set from ``--config``'s file (flags win)."""
    from click.core import ParameterSource

    from ..broker.config_file import ConfigError, read_config, suggest

    path = kwargs.pop("config_file")
    if path is None:
        return
    ctx = click.get_current_context()
    try:
        resolved = read_config(str(path), command)
    except ConfigError as exc:
        raise click.ClickException(f"{path}: {exc}") from None
    params = {param.name: param for param in ctx.command.params}
    for name, value in resolved.values.items():
        if ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            continue
        param = params[name]
        try:  # the option's own checks (ranges ...), so a file is held to what a flag is
            kwargs[name] = None if value is None else param.type.convert(value, param, ctx)
        except click.BadParameter as exc:
            key, text = resolved.sources[name]
            raise click.ClickException(f"{path}: invalid value {text!r} for {key}: {exc.message}") from None
    log = logging.getLogger("nereus.config")
    if resolved.ignored:
        log.info("%s: %d key(s) ignored, unknown to Nereus or without an equivalent here: %s", path,
                 len(resolved.ignored), ", ".join(resolved.ignored))
    if resolved.unknown:
        log.warning("%s: unknown key(s) ignored: %s", path,
                    ", ".join(f"{name} (did you mean {suggest(name)}?)" for name in resolved.unknown))
    for note in resolved.notes:
        log.warning("%s: %s", path, note)


def _advertised_listeners(kwargs: dict) -> tuple:
    from ..broker.listeners import ListenerError, parse_bind_addresses, parse_listeners

    text, internal, binds = kwargs["advertised_listeners"], kwargs["internal_listener_name"], kwargs["bind_addresses"]
    if not text:
        if internal or binds:
            raise click.UsageError("--internal-listener-name and --bind-addresses need --advertised-listeners")
        return (), None, ()
    if kwargs["advertised_address"]:
        raise click.UsageError("--advertised-address and --advertised-listeners cannot be used together "
                               "(advertisedAddress and advertisedListeners)")
    try:
        listeners, internal = parse_listeners(text, internal)
    except ListenerError as exc:
        raise click.UsageError(f"--advertised-listeners: {exc}") from None
    try:
        return listeners, internal, parse_bind_addresses(binds or "", listeners)
    except ListenerError as exc:
        raise click.UsageError(f"--bind-addresses: {exc}") from None


def _tls_of(tls, kwargs: dict):
    """``tls``, its files read now when a TLS listener needs them: a wrong path is one line, before anything starts."""
    from ..tls import TlsConfigError

    if any(kwargs[name] is not None for name in ("pulsar_tls_port", "https_port", "kafka_ssl_port",
                                                 "kafka_sasl_ssl_port")):
        try:
            tls.server_context()
        except TlsConfigError as exc:
            raise click.ClickException(f"cannot start: {exc}") from None
    return tls


def _sasl_settings(kwargs: dict):
    """The Kafka SASL listeners' settings (None without a SASL listener)."""
    from ..auth import AuthConfigError
    from ..auth.tokens import TokenValidator
    from ..kafka.server.security.sasl import SaslSettings, parse_mechanisms

    if kwargs["kafka_sasl_port"] is None and kwargs["kafka_sasl_ssl_port"] is None:
        return None
    try:
        mechanisms = parse_mechanisms(kwargs["sasl_mechanisms"])
    except ValueError as exc:
        raise click.UsageError(f"--sasl-mechanisms: {exc}") from None
    secret, public = kwargs["token_secret_key"], kwargs["token_public_key"]
    try:
        tokens = TokenValidator.from_settings(secret_key=secret, public_key=None if secret else public,
                                              role_claim=kwargs["token_auth_claim"]) if secret or public else None
        return SaslSettings(mechanisms, tokens)
    except (AuthConfigError, ValueError) as exc:
        raise click.ClickException(f"cannot start: {exc}") from None


def options_of(kwargs: dict):
    """The broker's options: each option's field (nereus.broker.options), then the settings made of several."""
    from ..auth import AuthSettings
    from ..broker.node import BrokerOptions
    from ..tls import TlsOptions

    listeners, internal, binds = _advertised_listeners(kwargs)
    if not kwargs["kafka_plaintext"] and all(kwargs[name] is None for name in (
            "kafka_ssl_port", "kafka_sasl_port", "kafka_sasl_ssl_port")):
        raise click.UsageError("--no-kafka-plaintext (kafkaListeners without PLAINTEXT://) needs another Kafka "
                               "listener: --kafka-ssl-port, --kafka-sasl-port or --kafka-sasl-ssl-port")
    limit = kwargs["max_num_partitions_per_partitioned_topic"]
    if limit and kwargs["default_partitions"] > limit:
        raise click.UsageError(f"--default-partitions (defaultNumPartitions) {kwargs['default_partitions']} is above "
                               f"--max-num-partitions-per-partitioned-topic (maxNumPartitionsPerPartitionedTopic) "
                               f"{limit}: auto-created topics could not be created")
    if kwargs["consumer_group_heartbeat_interval"] >= kwargs["consumer_group_session_timeout"]:
        raise click.UsageError("--consumer-group-heartbeat-interval (group.consumer.heartbeat.interval.ms) must be "
                               "below --consumer-group-session-timeout (group.consumer.session.timeout.ms)")
    if kwargs["wal_profile"] == "replicated" and not (
            kwargs["wal_ensemble"] >= kwargs["wal_write_quorum"] >= kwargs["wal_ack_quorum"]):
        raise click.UsageError("the replicated WAL profile needs --wal-ensemble (managedLedgerDefaultEnsembleSize) >= "
                               "--wal-write-quorum (managedLedgerDefaultWriteQuorum) >= --wal-ack-quorum "
                               "(managedLedgerDefaultAckQuorum)")
    if kwargs["wal_profile"] == "local" and "metadata" in kwargs and kwargs["wal_dir"] is None:
        raise click.UsageError("the local WAL profile needs --wal-dir (walDir): the broker's WAL replica")
    fields = broker_fields(kwargs)
    fields.update(authentication=_auth_settings(AuthSettings(**fields["authentication"])),
                  tls=_tls_of(TlsOptions(**fields["tls"]), kwargs), sasl=_sasl_settings(kwargs),
                  kafka_port=kwargs["kafka_port"] if kwargs["kafka_plaintext"] else None,
                  advertised_listeners=listeners, internal_listener=internal, bind_addresses=binds)
    options = BrokerOptions(**fields)
    from ..auth import AuthConfigError, Authenticator
    from ..broker.wal_replica import wal_credentials, wal_tls_contexts
    from ..tls import TlsConfigError

    try:
        wal_tls_contexts(options)  # its files read now: a wrong path is one line, before anything starts
        wal_credentials(options, Authenticator(options.authentication) if options.authentication.enabled else None)
    except (TlsConfigError, AuthConfigError) as exc:
        raise click.ClickException(f"cannot start: {exc}") from None
    return options


def _auth_settings(settings):
    """``settings`` (authentication), checked now (keys and htpasswd readable) so a mistake stops start-up."""
    from ..auth import AuthConfigError, Authenticator

    if settings.authorization_enabled and not settings.enabled:
        raise click.UsageError("--authorization (authorizationEnabled) needs --authentication (authenticationEnabled)")
    if settings.enabled:
        try:
            Authenticator(settings)
        except AuthConfigError as exc:
            raise click.ClickException(f"cannot start: {exc}") from None
    return settings


def metadata_trust(url: str, trust_file: str | None) -> str:
    """An ``oxia+tls://`` URL naming no CA trusts the broker's own (tlsTrustCertsFilePath), as Pulsar's
    broker client does."""
    if not trust_file or not url.startswith("oxia+tls://") or "trust=" in url.partition("?")[2]:
        return url
    from urllib.parse import quote

    return f"{url}{'&' if '?' in url else '?'}trust={quote(str(Path(trust_file).resolve()))}"


__all__ = ["apply_config", "metadata_trust", "options_of"]
