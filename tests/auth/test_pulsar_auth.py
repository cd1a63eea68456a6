"""Token and basic authentication of a real standalone, with the official Pulsar client and the admin CLI."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pulsar
import pytest

from nereus.auth.htpasswd import apr1
from nereus.auth.tokens import create_secret_key, create_token
from nereus.codec.pulsar import FrameDecoder, encode_command, pb, type_name, wrap
from tests.standalone_process import Standalone

NEREUS = [sys.executable, "-m", "nereus.cli"]
PROVIDERS = ("org.apache.pulsar.broker.authentication.AuthenticationProviderToken,"
             "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic")


def _cli(*args: str, check: bool = True, cwd=None) -> subprocess.CompletedProcess:
    result = subprocess.run([*NEREUS, *args], capture_output=True, text=True, timeout=60, cwd=cwd)
    if check and result.returncode != 0:
        raise AssertionError(f"nereus {' '.join(args)} failed: {result.stderr}")
    return result


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("auth")
    _cli("tokens", "create-secret-key", "--output", str(root / "secret.key"))
    (root / "htpasswd").write_text(f"ann:{apr1(b'ann-pw', b'q1w2e3r4')}\n")
    config = root / "standalone.conf"
    config.write_text(f"authenticationEnabled=true\nauthenticationProviders={PROVIDERS}\n"
                      f"tokenSecretKey=file://{root / 'secret.key'}\nbasicAuthConf=file://{root / 'htpasswd'}\n"
                      "superUserRoles=admin\nauthenticationRefreshCheckSeconds=0.5\n")
    node = Standalone(root / "data", ["--compaction-interval", "0", "--config", str(config)])
    node.start()
    node.secret = (root / "secret.key").read_bytes()
    node.key_url = f"file://{root / 'secret.key'}"
    yield node
    node.stop()


def _token(node, role: str, **kwargs) -> str:
    return create_token(role, secret_key=node.secret, **kwargs)


def _round_trip(node, auth, topic: str) -> None:
    client = pulsar.Client(node.url, authentication=auth, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        client.create_producer(topic).send(b"hello")
        assert consumer.receive(timeout_millis=10000).data() == b"hello"
    finally:
        client.close()


def _refused(node, auth, topic: str) -> None:
    """The official client is told why: AuthenticationError, never a timeout (its default operation timeout)."""
    client = pulsar.Client(node.url, authentication=auth)
    try:
        with pytest.raises(pulsar.AuthenticationError):
            client.create_producer(topic)
        with pytest.raises(pulsar.AuthenticationError):
            client.subscribe(topic, "s")
    finally:
        client.close()


def _connect_error(node, method: str, data: bytes) -> pb.CommandError:
    """The broker's answer to a CONNECT with these credentials, read off the wire."""
    sock = socket.create_connection(("127.0.0.1", node.pulsar_port), timeout=15)
    with sock:
        sock.sendall(encode_command(wrap(pb.CommandConnect(client_version="raw", protocol_version=21,
                                                           auth_method_name=method, auth_data=data))))
        frames = _frames_until_closed_raw(sock)
    assert [type_name(f.type) for f in frames] == ["ERROR"], "expected one ERROR, then the connection closed"
    return frames[0].body


def _frames_until_closed_raw(sock: socket.socket) -> list:
    """Every frame the broker sends on ``sock`` until it closes the connection."""
    decoder = FrameDecoder(1 << 20)
    frames = []
    while chunk := sock.recv(65536):
        decoder.receive_data(chunk)
        while (frame := decoder.next_frame()) is not None:
            frames.append(frame)
    return frames


def _topics(node) -> list[str]:
    request = urllib.request.Request(f"{node.http}/admin/v2/persistent/public/default",
                                     headers={"Authorization": f"Bearer {_token(node, 'admin')}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_token_accepted(server):
    _round_trip(server, pulsar.AuthenticationToken(_token(server, "alice")), "tok-ok")


def test_wrong_signature_expired_and_missing_credentials_refused_and_nothing_written(server):
    forged = create_token("alice", secret_key=create_secret_key())
    expired = _token(server, "alice", claims={"exp": int(time.time()) - 10})
    _refused(server, pulsar.AuthenticationToken(forged), "tok-forged")
    _refused(server, pulsar.AuthenticationToken(expired), "tok-expired")
    _refused(server, None, "tok-anonymous")
    for method, data in (("token", forged.encode()), ("token", expired.encode()), ("", b""),
                         ("basic", b"ann:wrong"), ("sasl", b"x")):
        assert _connect_error(server, method, data).error == pb.AuthenticationError
    written = _topics(server)
    for topic in ("tok-forged", "tok-expired", "tok-anonymous"):
        assert f"persistent://public/default/{topic}" not in written


def test_an_unknown_method_without_an_anonymous_role_is_refused_and_the_client_lives(server):
    """No provider for the method and no anonymousUserRole: an AuthenticationError the client survives."""
    assert _connect_error(server, "unknown", b"ann:ann-pw").error == pb.AuthenticationError
    script = ("import pulsar\n"
              f"c = pulsar.Client('{server.url}', operation_timeout_seconds=3,\n"
              "                   authentication=pulsar.AuthenticationBasic('ann', 'ann-pw', 'unknown'))\n"
              "try:\n"
              "    c.create_producer('unknown-method')\n"
              "except (pulsar.AuthenticationError, pulsar.Timeout, pulsar.ConnectError) as exc:\n"
              "    print('refused', type(exc).__name__)\n"
              "c.close()\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert any(line.startswith("refused") for line in done.stdout.splitlines()), done.stdout[-2000:]


def test_a_cpp_client_refused_at_connect_gets_the_error_on_its_first_request(server):
    """That client drops a connection whose CONNECT is answered by an ERROR and retries until it times out;
    it is answered CONNECTED, its first request gets AuthenticationError, and the connection closes."""
    sock = socket.create_connection(("127.0.0.1", server.pulsar_port), timeout=15)
    with sock:
        sock.sendall(encode_command(wrap(pb.CommandConnect(client_version="Pulsar-CPP-v4.2.0", protocol_version=20,
                                                           auth_method_name="none"))))
        sock.sendall(encode_command(wrap(pb.CommandPartitionedTopicMetadata(topic="persistent://public/default/x",
                                                                            request_id=7))))
        sock.sendall(encode_command(wrap(pb.CommandProducer(topic="persistent://public/default/x", producer_id=1,
                                                            request_id=8))))
        frames = _frames_until_closed_raw(sock)
    assert [type_name(f.type) for f in frames] == ["CONNECTED", "PARTITIONED_METADATA_RESPONSE"]
    answer = frames[1].body
    assert answer.request_id == 7 and answer.error == pb.AuthenticationError and "credentials" in answer.message
    assert "persistent://public/default/x" not in _topics(server)


def test_the_refusal_reaches_a_client_that_sends_more_after_it(server):
    """The broker closes a refused connection only after the client's end (or a short linger), reading and
    discarding what the client still sends: closing with unread input resets the connection, and the
    reset can drop the refusal before the client reads it."""
    sock = socket.create_connection(("127.0.0.1", server.pulsar_port), timeout=15)
    with sock:
        sock.sendall(encode_command(wrap(pb.CommandConnect(client_version="raw", protocol_version=21,
                                                           auth_method_name="token", auth_data=b"not-a-token"))))
        assert sock.recv(1, socket.MSG_PEEK)  # the answer is here: the broker is closing by now
        sock.sendall(encode_command(wrap(pb.CommandPing())))  # what a client had on the way meanwhile
        sock.shutdown(socket.SHUT_WR)
        frames = _frames_until_closed_raw(sock)
    assert [type_name(f.type) for f in frames] == ["ERROR"]
    assert frames[0].body.error == pb.AuthenticationError


def test_basic_accepted(server):
    _round_trip(server, pulsar.AuthenticationBasic("ann", "ann-pw"), "basic-ok")


def test_token_refreshed_on_a_live_connection(server):
    """A supplier of short-lived tokens keeps its connection across expiries (AUTH_CHALLENGE/AUTH_RESPONSE)."""
    issued = []

    def supplier() -> str:
        issued.append(time.time())
        return _token(server, "alice", expires_in=1)

    client = pulsar.Client(server.url, authentication=pulsar.AuthenticationToken(supplier),
                           operation_timeout_seconds=10)
    try:
        producer = client.create_producer("tok-refresh")
        deadline = time.monotonic() + 30
        while len(issued) < 3 and time.monotonic() < deadline:
            producer.send(b"x")
            time.sleep(0.2)
        assert len(issued) >= 3, "the broker never challenged the expiring token"
        producer.send(b"still-connected")
    finally:
        client.close()


def _connect_raw(node, token: str, *, refresh: bool) -> tuple[socket.socket, FrameDecoder]:
    sock = socket.create_connection(("127.0.0.1", node.pulsar_port), timeout=15)
    sock.sendall(encode_command(wrap(pb.CommandConnect(
        client_version="raw", protocol_version=21, auth_method_name="token", auth_data=token.encode(),
        feature_flags=pb.FeatureFlags(supports_auth_refresh=refresh)))))
    decoder = FrameDecoder(1 << 20)
    return sock, decoder


def _frames_until_closed(sock: socket.socket, decoder: FrameDecoder) -> list[str]:
    names = []
    while data := sock.recv(65536):
        decoder.receive_data(data)
        while (frame := decoder.next_frame()) is not None:
            names.append(type_name(frame.type))
            if names[-1] == "AUTH_CHALLENGE":
                assert frame.body.challenge.auth_method_name == "token"
                # answer with the same, now expired, token: the broker must refuse it
                sock.sendall(encode_command(wrap(pb.CommandAuthResponse(
                    protocol_version=21, response=pb.AuthData(auth_method_name="token",
                                                              auth_data=frame.body.challenge.auth_data)))))
    return names


@pytest.mark.parametrize("refresh", [True, False])
def test_expired_token_without_refresh_closes_the_connection(server, refresh):
    sock, decoder = _connect_raw(server, _token(server, "alice", expires_in=1), refresh=refresh)
    with sock:
        names = _frames_until_closed(sock, decoder)
    assert names[0] == "CONNECTED"
    assert ("AUTH_CHALLENGE" in names) == refresh


def test_admin_needs_credentials(server):
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{server.http}/admin/v2/tenants", timeout=10)
    assert refused.value.code == 401
    assert "reason" in json.loads(refused.value.read())
    url = ["admin", "--url", server.http]
    assert "public" in _cli(*url, "--token", _token(server, "admin"), "tenants", "list").stdout
    basic = json.dumps({"userId": "ann", "password": "ann-pw"})
    assert "public" in _cli(*url, "--auth-plugin", "basic", "--auth-params", basic, "tenants", "list").stdout
    denied = _cli(*url, "tenants", "list", check=False)
    output = (denied.stderr + denied.stdout).lower()
    assert denied.returncode != 0 and ("401" in output or "unauthorized" in output)
    forged = _cli(*url, "--token", create_token("admin", secret_key=create_secret_key()), "tenants", "list",
                  check=False)
    assert forged.returncode != 0
    assert server.metrics()  # /metrics stays open (authenticateMetricsEndpoint=false)


def test_anonymous_role(tmp_path):
    key = base64.b64encode(create_secret_key()).decode()
    node = Standalone(tmp_path / "data", ["--compaction-interval", "0", "--authentication",
                                          "--authentication-providers", "token", "--token-secret-key",
                                          f"data:;base64,{key}", "--anonymous-user-role", "guest",
                                          "--sbt-catalog", "postgresql://lake:s3cret@127.0.0.1:5/tables"])
    node.start()
    try:
        _round_trip(node, None, "anon-ok")
        request = urllib.request.urlopen(f"{node.http}/admin/v2/tenants", timeout=10)
        assert "public" in json.loads(request.read())
        # The runtime settings show the authentication keys one by one, an inline key redacted.
        body = urllib.request.urlopen(f"{node.http}/admin/v2/brokers/configuration/runtime", timeout=10).read()
        runtime = json.loads(body)
        assert key.encode() not in body and runtime["tokenSecretKey"] == "******"
        assert b"s3cret" not in body and runtime["sbtCatalogUri"] == "postgresql://lake:******@127.0.0.1:5/tables"
        assert runtime["authenticationEnabled"] == "true" and runtime["anonymousUserRole"] == "guest"
        assert runtime["authenticationProviders"] == "token"
    finally:
        node.stop()


def test_unknown_provider_refused_at_start(tmp_path):
    result = _cli("standalone", "--data-dir", str(tmp_path / "d"), "--authentication", "--authentication-providers",
                  "org.apache.pulsar.broker.authentication.AuthenticationProviderKerberos", check=False)
    assert result.returncode == 1
    assert "AuthenticationProviderKerberos" in result.stderr


def test_tokens_command_round_trips(tmp_path):
    secret = tmp_path / "secret.key"
    _cli("tokens", "create-secret-key", "--output", str(secret))
    assert len(secret.read_bytes()) == 32
    token = _cli("tokens", "create", "--subject", "alice", "--secret-key", f"file://{secret}",
                 "--expiry-time", "1h").stdout.strip()
    assert json.loads(_cli("tokens", "validate", token, "--secret-key", f"file://{secret}").stdout)["sub"] == "alice"
    shown = _cli("tokens", "show", token).stdout.split("---")
    assert json.loads(shown[0]) == {"alg": "HS256"} and json.loads(shown[1])["sub"] == "alice"
    other = tmp_path / "other.key"
    _cli("tokens", "create-secret-key", "--output", str(other))
    assert _cli("tokens", "validate", token, "--secret-key", f"file://{other}", check=False).returncode == 1
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    _cli("tokens", "create-key-pair", "--signature-algorithm", "RS256", "--output-private-key", str(private),
         "--output-public-key", str(public))
    signed = _cli("tokens", "create", "-s", "bob", "--private-key", f"file://{private}").stdout.strip()
    assert json.loads(_cli("tokens", "show", signed).stdout.split("---")[0])["alg"] == "RS256"
    assert json.loads(_cli("tokens", "validate", signed, "--public-key", f"file://{public}").stdout)["sub"] == "bob"


def test_keys_are_private_and_relative_file_urls_name_the_working_directory(tmp_path):
    (tmp_path / "secret.key").write_bytes(b"old")
    (tmp_path / "secret.key").chmod(0o644)  # a key written over an existing file is private too
    _cli("tokens", "create-secret-key", "--output", "secret.key", cwd=tmp_path)
    _cli("tokens", "create-key-pair", "--output-private-key", "private.key", "--output-public-key", "public.key",
         cwd=tmp_path)
    assert [(tmp_path / name).stat().st_mode & 0o777 for name in ("secret.key", "private.key")] == [0o600, 0o600]
    token = _cli("tokens", "create", "--subject", "alice", "--secret-key", "file://secret.key", cwd=tmp_path).stdout
    checked = _cli("tokens", "validate", token.strip(), "--secret-key", "file://secret.key", cwd=tmp_path).stdout
    assert json.loads(checked)["sub"] == "alice"
    missing = _cli("tokens", "create", "-s", "a", "--secret-key", "file://keys/missing.key", check=False, cwd=tmp_path)
    assert missing.returncode == 1
    assert "--secret-key: cannot read keys/missing.key: No such file or directory" in missing.stderr
    empty = _cli("tokens", "create", "-s", "a", "--secret-key", "file://", check=False, cwd=tmp_path)
    assert empty.returncode == 1 and "'file://' names no file" in empty.stderr
