"""``nereus admin`` as a separate process: exit codes, one-line errors, the URL from the environment, auth headers."""

from __future__ import annotations

import base64
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.standalone_process import free_port

from .conftest import run_process


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NEREUS_ADMIN_URL", "PULSAR_ADMIN_URL")}
    return {**env, **extra}


def test_json_output_parses_and_the_url_comes_from_the_environment(standalone):
    done = run_process("admin", "--json", "tenants", "list", env=_env(NEREUS_ADMIN_URL=standalone.http))
    assert done.returncode == 0, done.stderr
    assert "public" in json.loads(done.stdout)
    done = run_process("admin", "clusters", "list", "--json", env=_env(PULSAR_ADMIN_URL=standalone.http))
    assert json.loads(done.stdout) == ["standalone"]


def test_errors_are_one_line_with_exit_code_1(standalone):
    done = run_process("admin", "--url", standalone.http, "topics", "stats", "public/default/never-created")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == "not found: Topic not found\n"

    port = free_port()  # nothing listens there
    done = run_process("admin", "--url", f"http://127.0.0.1:{port}", "tenants", "list")
    assert done.returncode == 1 and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(f"cannot reach http://127.0.0.1:{port}: ")

    done = run_process("admin", "--url", "localhost:8080", "tenants", "list")
    assert done.returncode == 1 and done.stderr == "invalid admin URL 'localhost:8080': expected http://host:port\n"


class _Recorder(BaseHTTPRequestHandler):
    """Answers every call with ``[]`` (after one redirect of ``/admin/v2/moved``) and keeps what it got."""

    seen: list = []

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        if self.path.startswith("/admin/v2/persistent/t/ns/moved"):
            self.send_response(307)
            self.send_header("Location", self.path.replace("moved", "owner"))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"[]")

    do_GET = do_PUT = do_POST = do_DELETE = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def recorder():
    _Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.seen
    server.shutdown()
    server.server_close()


def test_auth_options_send_the_authorization_header(recorder, tmp_path):
    url, seen = recorder
    assert run_process("admin", "--url", url, "--token", "abc", "tenants", "list").returncode == 0
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    assert run_process("admin", "--url", url, "--auth-plugin", plugin, "--auth-params", "token:xyz",
                       "tenants", "list").returncode == 0
    assert run_process("admin", "--url", url, "--auth-plugin", plugin, "--auth-params", f"file://{token_file}",
                       "tenants", "list").returncode == 0
    assert run_process("admin", "--url", url, "--auth-plugin", plugin, "--auth-params", "file://token",
                       "tenants", "list", cwd=tmp_path).returncode == 0  # relative to the working directory
    done = run_process("admin", "--url", url, "--auth-plugin", plugin, "--auth-params", "file://no-such-token",
                       "tenants", "list", cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.startswith("cannot read the token file no-such-token: ")
    basic = json.dumps({"userId": "ada", "password": "pw"})
    assert run_process("admin", "--url", url, "--auth-plugin", "org.apache.pulsar.client.impl.auth.AuthenticationBasic",
                       "--auth-params", basic, "tenants", "list").returncode == 0
    assert [s[2] for s in seen] == ["Bearer abc", "Bearer xyz", "Bearer from-file",
                                    "Bearer from-file", "Basic " + base64.b64encode(b"ada:pw").decode()]
    done = run_process("admin", "--url", url, "--auth-plugin", "AuthenticationTls", "tenants", "list")
    assert done.returncode == 1 and done.stderr.startswith("unsupported --auth-plugin AuthenticationTls")


def test_a_redirect_to_the_owner_keeps_the_method_and_body(recorder):
    url, seen = recorder
    done = run_process("admin", "--url", url, "subscriptions", "create", "t/ns/moved", "-s", "s", "-m", "earliest")
    assert done.returncode == 0, done.stderr
    body = json.dumps({"ledgerId": -1, "entryId": -1, "partitionIndex": -1}).encode()
    assert [(m, p, b) for m, p, _auth, b in seen] == [
        ("PUT", "/admin/v2/persistent/t/ns/moved/subscription/s", body),
        ("PUT", "/admin/v2/persistent/t/ns/owner/subscription/s", body)]
