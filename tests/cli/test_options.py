"""The options table (nereus.broker.options): every option reachable by its flag and by each of its
configuration keys, passed on to the child brokers of `standalone --brokers N`, shown by the runtime
configuration; and a broker given no option runs with BrokerOptions' defaults."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import click
import pytest
from click.testing import CliRunner

from nereus import cli
from nereus.cli import servers
from nereus.auth import AuthSettings
from nereus.broker.admin.brokers import runtime_config
from nereus.broker.node import BrokerOptions
from nereus.broker.options import BOTH, BROKER, OPTIONS, OWN, PORT, SHIFTED, STANDALONE, broker_fields, runtime_names
from nereus.broker.standalone import child_command
from nereus.tls import TlsOptions

#: What the broker command needs to start; the options under test come after, and win.
REQUIRED = {BROKER: "metadataStoreUrl=oxia://m:6648\nobjectStoreUrl=file:///nowhere\n", STANDALONE: ""}
#: Values the options' types cannot tell.
VALUES = {"metadata": "oxia://elsewhere:6649", "object_store": "file:///elsewhere", "sasl_mechanisms": "PLAIN",
          "sbt_catalog": "sqlite:///elsewhere/catalog.db"}


def _other(option) -> object:
    """A value of ``option`` other than its default."""
    if option.param in VALUES:
        return VALUES[option.param]
    if option.is_flag:
        return not option.default
    kind = option.type
    if isinstance(kind, click.Choice):
        return next(choice for choice in kind.choices if choice != option.default)
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        low = kind.min if kind.min is not None else 0
        value = (option.default if option.default is not None else low) + 1
        return value if kind.max is None or value <= kind.max else low
    return "some/path" if isinstance(kind, click.Path) else "some-text"


def _flag(option, value) -> list[str]:
    return [option.flag.split("/")[0 if value else 1]] if option.is_flag else [option.flag, str(value)]


def _key_text(key: str, value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value * 1000) if key.endswith((".ms", "Millis")) else str(value)


class _Started:
    """Stands for the server coroutine the command would run."""

    def close(self) -> None:
        pass


@pytest.fixture
def invoke(tmp_path, monkeypatch):
    """``invoke(command, args, config_text)``: the option values and the standalone's configuration it
    would run with (nothing starts)."""
    seen = {}

    def options_of(values: dict) -> BrokerOptions:
        seen["values"] = dict(values)
        return BrokerOptions()

    def run_standalone(config) -> _Started:
        seen["config"] = config
        return _Started()

    monkeypatch.setattr(servers, "options_of", options_of)
    monkeypatch.setattr(servers, "run_server", lambda coro, *args, **kwargs: coro.close())
    monkeypatch.setattr(servers, "check_object_store", lambda url, timeout: None)
    monkeypatch.setattr("nereus.broker.data_lock.lock_data_dir", lambda path: None)
    monkeypatch.setattr("nereus.broker.standalone.run_standalone", run_standalone)
    monkeypatch.setattr("nereus.broker.run.run_broker", lambda *args, **kwargs: _Started())

    def run(command: str, args: list[str], config: str = ""):
        seen.clear()
        path = tmp_path / "options.conf"
        path.write_text(REQUIRED[command] + config)
        result = CliRunner().invoke(cli.main, [command, "--config", str(path), *args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return seen["values"], seen.get("config")

    return run


@pytest.mark.parametrize("command", [STANDALONE, BROKER])
def test_every_option_is_reachable_by_its_flag_and_by_each_of_its_keys(command, invoke):
    defaults, _ = invoke(command, [])
    for option in OPTIONS:
        if command not in option.commands or option.param == "config_file":
            continue
        value = _other(option)
        by_flag, _ = invoke(command, _flag(option, value))
        assert by_flag[option.param] != defaults[option.param], option.flag
        for key in option.keys:
            by_key, _ = invoke(command, [], f"{key}={_key_text(key, value)}\n")
            assert by_key[option.param] == by_flag[option.param], key
        if option.field is not None:  # and on to its BrokerOptions field
            setting, _, name = option.field.rpartition(".")
            field = [(fields[setting] if setting else fields)[name] for fields in map(broker_fields, (by_flag, defaults))]
            assert field[0] != field[1], option.flag


def test_the_children_of_a_standalone_get_its_options_their_ports_shifted(invoke, tmp_path):
    given = [option for option in OPTIONS if option.commands == BOTH and option.children != OWN]
    assert {o.flag for o in given if o.type is PORT} == {o.flag for o in given if o.children == SHIFTED}
    args = [arg for option in given for arg in _flag(option, _other(option))]
    parent, config = invoke(STANDALONE, ["--brokers", "3", *args])
    argv = child_command(2, config, "oxia://m:6648", (tmp_path / "objects").as_uri())
    child, _ = invoke(BROKER, argv[argv.index(BROKER) + 1:])
    for option in given:
        want = parent[option.param] + 2 if option.children == SHIFTED else parent[option.param]
        assert child[option.param] == want, option.flag
    assert child["object_store"] == (tmp_path / "objects").as_uri()


def test_a_broker_given_no_option_runs_with_the_default_broker_options(monkeypatch):
    started = {}

    def run_broker(metadata, objects, options, **kwargs) -> _Started:
        started["options"] = options
        return _Started()

    monkeypatch.setattr("nereus.broker.run.run_broker", run_broker)
    monkeypatch.setattr(servers, "run_server", lambda coro, *args, **kwargs: coro.close())
    monkeypatch.setattr(servers, "check_object_store", lambda url, timeout: None)
    result = CliRunner().invoke(cli.main, ["broker", "--metadata", "oxia://m:6648", "--object-store", "file:///x"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert started["options"] == BrokerOptions()


def test_the_runtime_configuration_shows_every_option_under_its_name(invoke):
    values, _ = invoke(BROKER, [arg for option in OPTIONS if BROKER in option.commands and option.param != "config_file"
                                for arg in _flag(option, _other(option))])
    fields = broker_fields(values)
    fields.update(authentication=AuthSettings(**fields["authentication"]), tls=TlsOptions(**fields["tls"]))
    combined = {"kafka_port", "sasl", "advertised_listeners", "internal_listener", "bind_addresses"}  # by nereus.cli
    options = replace(BrokerOptions(), **{name: value for name, value in fields.items() if name not in combined})
    node = SimpleNamespace(options=options, address=SimpleNamespace(kafka_host="h"), http_port=values["http_port"],
                           pulsar=SimpleNamespace(port=values["pulsar_port"]), kafka=SimpleNamespace(listener_ports={}),
                           membership=SimpleNamespace(name=values["broker_name"]))
    shown = runtime_config(SimpleNamespace(node=node))
    names = runtime_names()
    for option in OPTIONS:
        if option.field is None or option.field in combined or option.param == "advertised_address":
            continue  # the advertised address shown is the one clients are given
        setting, _, name = option.field.partition(".")
        value = getattr(getattr(options, setting), name) if name else getattr(options, setting)
        text = ",".join(value) if isinstance(value, tuple) else str(value).lower() if isinstance(value, bool) \
            else str(value)
        secret = option.param in ("token_secret_key", "broker_client_auth_params")  # inline keys and tokens
        assert shown[names[option.field]] == ("******" if secret else text), option.flag
