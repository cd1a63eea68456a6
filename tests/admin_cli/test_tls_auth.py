"""``nereus admin`` against an HTTPS standalone with a private CA and token + basic authentication,
configured by pulsar-admin's options or a Pulsar client.conf (no ``SSL_CERT_FILE``)."""

from __future__ import annotations

import json
import os

import pytest

from nereus.auth.htpasswd import apr1
from nereus.auth.tokens import create_secret_key, create_token
from tests.standalone_process import free_port, running

from .conftest import run_process

pytest.importorskip("cryptography")

from tests.tls.certs import make_pki  # noqa: E402

PROVIDERS = ("org.apache.pulsar.broker.authentication.AuthenticationProviderToken,"
             "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic")
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
BASIC_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A standalone serving HTTPS with a certificate of a private CA, admin calls authenticated."""
    root = tmp_path_factory.mktemp("admin-tls")
    pki = make_pki(root / "pki")
    secret = create_secret_key()
    (root / "secret.key").write_bytes(secret)
    (root / "htpasswd").write_text(f"ann:{apr1(b'ann-pw', b'q1w2e3r4')}\n")
    https = free_port()
    config = root / "standalone.conf"
    config.write_text(f"webServicePortTls={https}\ntlsCertificateFilePath={pki.server_cert}\n"
                      f"tlsKeyFilePath={pki.server_key}\nauthenticationEnabled=true\n"
                      f"authenticationProviders={PROVIDERS}\ntokenSecretKey=file://{root / 'secret.key'}\n"
                      f"basicAuthConf=file://{root / 'htpasswd'}\nsuperUserRoles=admin,ann\n")
    with running(root / "data", ["--compaction-interval", "0", "--config", str(config)]) as node:
        node.https = f"https://localhost:{https}"
        node.ca = pki.ca
        node.admin_token = create_token("admin", secret_key=secret)
        node.root = root
        yield node


def _env(**extra) -> dict:
    unset = ("SSL_CERT_FILE", "SSL_CERT_DIR", "NEREUS_ADMIN_URL", "PULSAR_ADMIN_URL", "PULSAR_CLIENT_CONF",
             "NEREUS_ADMIN_TOKEN")
    return {**{k: v for k, v in os.environ.items() if k not in unset}, **extra}


def _admin(*args: str, **env) -> tuple[int, str, str]:
    done = run_process("admin", *args, env=_env(**env))
    return done.returncode, done.stdout, done.stderr


def test_options_trust_a_private_ca_and_send_credentials(secured):
    code, out, err = _admin("--url", secured.https, "--tls-trust-cert-path", str(secured.ca),
                            "--token", secured.admin_token, "tenants", "list", "--json")
    assert code == 0, err
    assert "public" in json.loads(out)
    code, out, err = _admin("--url", secured.https, "--tls-trust-cert-path", str(secured.ca),
                            "--auth-plugin", BASIC_PLUGIN, "--auth-params", '{"userId": "ann", "password": "ann-pw"}',
                            "tenants", "list")
    assert code == 0 and "public" in out, err
    code, out, err = _admin("--url", secured.https, "--tls-allow-insecure", "--auth-plugin", TOKEN_PLUGIN,
                            "--auth-params", f"token:{secured.admin_token}", "clusters", "list")
    assert code == 0 and "standalone" in out, err


def test_mistakes_are_one_readable_line(secured):
    code, _, err = _admin("--url", secured.https, "--token", secured.admin_token, "tenants", "list")
    assert code == 1 and len(err.splitlines()) == 1
    assert "certificate verify failed" in err and "--tls-trust-cert-path" in err, err
    code, _, err = _admin("--url", secured.https, "--tls-trust-cert-path", str(secured.ca), "tenants", "list")
    assert code == 1 and err.startswith("unauthorized: "), err
    missing = secured.root / "no-such-ca.pem"
    code, _, err = _admin("--url", secured.https, "--tls-trust-cert-path", str(missing), "tenants", "list")
    assert code == 1 and err.startswith(f"cannot read the trusted certificates {missing}: "), err


def test_a_pulsar_client_conf_gives_url_credentials_and_trust(secured, tmp_path):
    (tmp_path / "admin.token").write_text(secured.admin_token + "\n")
    conf = tmp_path / "client.conf"
    conf.write_text("# as Pulsar's conf/client.conf\n"
                    f"webServiceUrl={secured.https}/\nbrokerServiceUrl=pulsar://localhost:6650/\n"
                    f"authPlugin={TOKEN_PLUGIN}\nauthParams=file://{tmp_path / 'admin.token'}\n"
                    f"tlsTrustCertsFilePath={secured.ca}\ntlsAllowInsecureConnection=false\n"
                    "tlsEnableHostnameVerification=true\n")
    code, out, err = _admin("--conf", str(conf), "tenants", "list")
    assert code == 0 and "public" in out, err
    code, out, err = _admin("clusters", "list", PULSAR_CLIENT_CONF=str(conf))
    assert code == 0 and "standalone" in out, err
    # The default place, and an option overriding the file's value.
    (tmp_path / "nereus").mkdir()
    conf.rename(tmp_path / "nereus" / "client.conf")
    code, out, err = _admin("tenants", "list", XDG_CONFIG_HOME=str(tmp_path))
    assert code == 0 and "public" in out, err
    code, _, err = _admin("--token", "not-a-token", "tenants", "list", XDG_CONFIG_HOME=str(tmp_path))
    assert code == 1 and err.startswith("unauthorized: "), err

    code, _, err = _admin("--conf", str(tmp_path / "absent.conf"), "tenants", "list")
    assert code == 1 and err.startswith(f"cannot read the client configuration {tmp_path / 'absent.conf'}: "), err
