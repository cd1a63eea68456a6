"""The broker options as the command line, the configuration file, the children of `--brokers N` and the
runtime-configuration REST answer see them, compared with a recorded snapshot (options_snapshot.json).

A change to any option's flag, default, type, help, configuration key or REST name shows here.
``NEREUS_WRITE_OPTIONS_SNAPSHOT=1`` records the snapshot again.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from pathlib import Path
from types import SimpleNamespace

import click
import click.testing
import pytest

from nereus import cli
from nereus.broker import config_file, standalone
from nereus.broker.admin.brokers import runtime_config
from nereus.broker.node import BrokerOptions

SNAPSHOT = Path(__file__).with_name("options_snapshot.json")
SECRET = "data:;base64," + base64.b64encode(b"k" * 32).decode()
HTPASSWD = "data:;base64," + base64.b64encode(b"user:$apr1$x$y\n").decode()


def _plain(value, tmp: str):
    """``value`` as JSON data, the temporary directory written <tmp>."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), tmp) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(item, tmp) for item in value]
    if isinstance(value, dict):
        return {str(k): _plain(v, tmp) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (str, Path)):
        return str(value).replace(tmp, "<tmp>")
    return type(value).__name__


def _params(command: click.Command) -> list:
    ctx = click.Context(command, info_name=command.name, terminal_width=100, max_content_width=100)
    out = []
    for param in command.params:
        info = param.to_info_dict()
        info["show_default"] = getattr(param, "show_default", None)
        out.append(json.loads(json.dumps(info, default=str)))
    return [out, command.get_help(ctx)]


def _key_sample(key: config_file.Key) -> str:
    samples = {"_int": "7", "_float": "2.5", "_millis": "1500", "_bool": "false", "_mechanisms": "PLAIN,SCRAM-SHA-512",
               "_creation_type": "partitioned", "_listeners": "SSL://h:9093,SASL_PLAINTEXT://h:9094"}
    special = {"schemaCompatibilityStrategy": "BACKWARD", "tlsEnabled": "true"}
    return special.get(key.name) or samples.get(getattr(key.convert, "__name__", ""), "some-text")


def _config_keys(texts: dict[str, str]) -> dict:
    """Each key resolved from a sample value (the one recorded, for a key the snapshot has)."""
    out = {}
    for name, key in sorted(config_file.KEYS.items()):
        text = texts.get(name) or _key_sample(key)
        row = {"text": text}
        for command in (config_file.STANDALONE, config_file.BROKER):
            got = config_file.resolve([(1, name, text)], command)
            row[command] = {"values": got.values, "ignored": got.ignored, "notes": got.notes}
        out[name] = json.loads(json.dumps(row, default=str))
    return out


def _standalone_config(args: list[str], monkeypatch) -> standalone.StandaloneConfig:
    captured = {}
    monkeypatch.setattr(cli, "_serve", lambda coro, *a, **k: (captured.setdefault("coro", coro), coro.close()))
    monkeypatch.setattr("nereus.broker.standalone.run_standalone",
                        lambda config: _Closing(captured.setdefault("config", config)))
    monkeypatch.setattr("nereus.broker.data_lock.lock_data_dir", lambda path: None)
    result = click.testing.CliRunner().invoke(cli.main, ["standalone", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return captured["config"]


class _Closing:
    """Stands for the coroutine run_standalone would return."""

    def __init__(self, config) -> None:
        self.config = config

    def close(self) -> None:
        pass


def _broker_of(argv: list[str], monkeypatch) -> dict:
    captured = {}

    def run_broker(metadata, objects, options, *, session_timeout, metadata_timeout):
        captured.update(metadata=metadata, objects=objects, options=options, session_timeout=session_timeout,
                        metadata_timeout=metadata_timeout)
        return _Closing(None)

    monkeypatch.setattr("nereus.broker.run.run_broker", run_broker)
    monkeypatch.setattr(cli, "_serve", lambda coro, *a, **k: coro.close())
    result = click.testing.CliRunner().invoke(cli.main, argv, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return captured


def _samples(tmp: Path) -> dict[str, list[str]]:
    from tests.tls.certs import make_pki

    pki = make_pki(tmp / "pki")
    conf = tmp / "sample.conf"
    conf.write_text("brokerServicePort=26650\nallowAutoTopicCreation=false\ngroup.consumer.session.timeout.ms=30000\n"
                    "compactionMinMB=2\nkafkaListeners=PLAINTEXT://:29092,SASL_PLAINTEXT://:29094\n"
                    "saslAllowedMechanisms=SCRAM-SHA-256\ntokenAuthClaim=who\nnum.partitions=4\n"
                    "brokerServiceCompactionMonitorIntervalInSeconds=0\n")
    return {
        "defaults": ["--data-dir", str(tmp / "d1"), "--brokers", "2"],
        "config": ["--data-dir", str(tmp / "d2"), "--brokers", "3", "--config", str(conf), "--zone", "z9"],
        "everything": [
            "--data-dir", str(tmp / "d3"), "--oxia-port", "7000", "--object-store", (tmp / "objects").as_uri(),
            "--metadata-shards", "2", "--brokers", "3", "--bind", "0.0.0.0", "--http-port", "18080",
            "--pulsar-port", "16650", "--kafka-port", "19092", "--no-kafka-plaintext", "--pulsar-tls-port", "16651",
            "--https-port", "18443", "--kafka-ssl-port", "19093", "--kafka-sasl-port", "19094",
            "--kafka-sasl-ssl-port", "19095", "--sasl-mechanisms", "PLAIN,OAUTHBEARER",
            "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
            "--tls-trust-certs-file", str(pki.ca), "--tls-require-client-cert", "--tls-offload-processes", "2",
            "--advertised-address", "adv.example", "--cluster-name", "c1", "--zone", "z1", "--broker-name", "bn",
            "--no-auto-topic-creation", "--auto-topic-creation-type", "partitioned", "--default-partitions", "3",
            "--max-num-partitions-per-partitioned-topic", "50", "--max-replication-factor", "5",
            "--schema-compatibility-strategy", "backward", "--no-deduplication", "--default-retention-minutes", "60",
            "--default-retention-mb", "100", "--max-message-size", "2000000", "--max-connections-per-ip", "7",
            "--max-connection-creation-rate", "2.5", "--frame-read-timeout", "12",
            "--max-pending-bytes-per-connection", "100000", "--max-pending-bytes-per-broker", "200000",
            "--max-pending-publish-requests-per-connection", "10", "--consumer-group-heartbeat-interval", "1",
            "--consumer-group-session-timeout", "20", "--transactional-id-expiration", "3600",
            "--session-timeout", "7", "--gc-interval", "5", "--gc-grace", "6", "--gc-pending-timeout", "25",
            "--compaction-interval", "3", "--compaction-max-age", "4", "--compaction-min-mb", "1.5",
            "--compaction-monitor-interval", "9", "--authentication", "--authentication-providers", "token,basic",
            "--token-secret-key", SECRET, "--token-auth-claim", "role", "--basic-auth-conf", HTPASSWD,
            "--anonymous-user-role", "anon", "--super-user-roles", "a,b", "--authentication-refresh-check-seconds",
            "5", "--authenticate-metrics", "--authorization", "--authorization-wildcards",
            "--log-dir", str(tmp / "logs")],
        "insecure": ["--data-dir", str(tmp / "d4"), "--brokers", "2", "--https-port", "18444",
                     "--tls-cert-file", str(pki.server_cert), "--tls-key-file", str(pki.server_key),
                     "--tls-allow-insecure", "--token-public-key", SECRET, "--max-message-size", "4096",
                     "--log-dir", "relative-logs"],
    }


def _runtime(options: BrokerOptions, tmp: str) -> dict:
    node = SimpleNamespace(options=options, address=SimpleNamespace(kafka_host="adv"), http_port=1,
                           pulsar=SimpleNamespace(port=2), kafka=SimpleNamespace(listener_ports={"PLAINTEXT": 3}),
                           membership=SimpleNamespace(name="member"))
    return _plain(runtime_config(SimpleNamespace(node=node)), tmp)


#: What a standalone's configuration holds of its options.
CONFIG_FIELDS = ("data_dir", "broker", "oxia_port", "object_store", "metadata_shards", "session_timeout", "brokers")


def _snapshot(tmp_path: Path, monkeypatch, texts: dict[str, str]) -> dict:
    tmp = str(tmp_path)
    monkeypatch.chdir(tmp_path)
    out = {"commands": {name: _params(cli.main.commands[name]) for name in ("standalone", "broker")},
           "keys": _config_keys(texts), "standalone": {}, "runtime": {"default": _runtime(BrokerOptions(), tmp)}}
    for name, args in _samples(tmp_path).items():
        config = _standalone_config(args, monkeypatch)
        argv = standalone.child_command(1, config, "oxia://127.0.0.1:6648", (tmp_path / "child-objects").as_uri())
        child = _broker_of(argv[argv.index("--lifeline-stdin") + 1:], monkeypatch)
        out["standalone"][name] = {"config": {name: _plain(getattr(config, name), tmp) for name in CONFIG_FIELDS}, "child_prefix": _plain(argv[:3], tmp),
                                   "child": _plain(child, tmp)}
        out["runtime"][name] = _runtime(config.broker, tmp)
    return json.loads(json.dumps(out))


def test_the_options_are_as_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(cli.sys, "executable", "python")
    want = json.loads(SNAPSHOT.read_text()) if SNAPSHOT.exists() else {"keys": {}}
    got = _snapshot(tmp_path, monkeypatch, {name: row["text"] for name, row in want["keys"].items()})
    if os.environ.get("NEREUS_WRITE_OPTIONS_SNAPSHOT"):
        SNAPSHOT.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip("snapshot written")
    for part in want:
        assert got[part] == want[part], part
