"""Unit checks of the token, htpasswd and provider logic (no server)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import subprocess
import time

import bcrypt
import pytest

from nereus.auth import AuthConfigError, AuthenticationFailed, AuthSettings, Authenticator
from nereus.auth.htpasswd import Htpasswd, apr1, check_password
from nereus.auth.keys import read_value
from nereus.auth.tokens import (TokenValidator, create_key_pair, create_secret_key, create_token, decode_unverified,
                                parse_duration)


def test_hs256_token_round_trip_and_claims():
    key = create_secret_key()
    assert len(key) == 32
    token = create_token("alice", secret_key=key, expires_in=3600)
    header, claims = decode_unverified(token)
    assert header == {"alg": "HS256"}  # Pulsar's layout: no typ
    assert claims["sub"] == "alice"
    checked = TokenValidator(secret_key=key).validate(token)
    assert checked.role == "alice" and checked.expires_at == claims["exp"]


def test_wrong_key_expired_and_missing_subject_are_refused():
    key = create_secret_key()
    validator = TokenValidator(secret_key=key)
    with pytest.raises(AuthenticationFailed, match="signature"):
        validator.validate(create_token("alice", secret_key=create_secret_key()))
    expired = create_token("alice", secret_key=key, claims={"exp": int(time.time()) - 1})
    with pytest.raises(AuthenticationFailed, match="expired"):
        validator.validate(expired)
    with pytest.raises(AuthenticationFailed, match="sub"):
        validator.validate(create_token("x", secret_key=key, claims={"sub": ""}))
    with pytest.raises(AuthenticationFailed):
        validator.validate("not.a.token")


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_key_pair_tokens_checked_with_the_public_key(algorithm):
    private, public = create_key_pair(algorithm)
    token = create_token("bob", private_key=private)
    assert decode_unverified(token)[0]["alg"] == algorithm
    assert TokenValidator(public_key=public).validate(token).role == "bob"
    other_private, _ = create_key_pair(algorithm)
    with pytest.raises(AuthenticationFailed):
        TokenValidator(public_key=public).validate(create_token("bob", private_key=other_private))


def test_an_hmac_token_is_refused_by_a_public_key_validator():
    """The public key's bytes must never be usable as an HMAC secret (algorithm confusion)."""
    _, public = create_key_pair("RS256")
    def b64(raw: bytes) -> bytes:
        return base64.urlsafe_b64encode(raw).rstrip(b"=")

    signing_input = b64(b'{"alg":"HS256"}') + b"." + b64(b'{"sub":"root"}')
    forged = (signing_input + b"." + b64(hmac.new(public, signing_input, hashlib.sha256).digest())).decode()
    with pytest.raises(AuthenticationFailed):
        TokenValidator(public_key=public).validate(forged)


def test_custom_role_claim():
    key = create_secret_key()
    token = create_token("svc", secret_key=key, claims={"role": "admin"})
    assert TokenValidator(secret_key=key, role_claim="role").validate(token).role == "admin"


def test_key_values_in_pulsar_forms(tmp_path):
    key = create_secret_key()
    path = tmp_path / "secret.key"
    path.write_bytes(key)
    encoded = base64.b64encode(key).decode()
    assert read_value(f"file://{path}", "k") == key
    assert read_value(str(path), "k") == key
    assert read_value(f"data:;base64,{encoded}", "k") == key
    assert read_value(encoded, "k") == key
    with pytest.raises(AuthConfigError, match="cannot read"):
        read_value(f"file://{tmp_path}/missing", "tokenSecretKey")


def test_durations():
    assert parse_duration("1h") == 3600 and parse_duration("2d") == 172800 and parse_duration("30") == 30
    with pytest.raises(ValueError):
        parse_duration("1 fortnight")


def test_apr1_matches_openssl():
    expected = subprocess.run(["openssl", "passwd", "-apr1", "-salt", "Xy12ab34", "p@ss"], check=True,
                              capture_output=True, text=True).stdout.strip()
    assert apr1(b"p@ss", b"Xy12ab34") == expected
    assert check_password("p@ss", expected) and not check_password("wrong", expected)


def test_htpasswd_schemes():
    sha = "{SHA}" + base64.b64encode(hashlib.sha1(b"pw-sha").digest()).decode()
    bcrypt_y = bcrypt.hashpw(b"pw-bcrypt", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$", 1)
    text = f"# users\nann:{apr1(b'pw-apr', b'saltsalt')}\nbea:{bcrypt_y}\ncal:{sha}\n"
    users = Htpasswd.parse(text)
    assert users.check("ann", "pw-apr") == "ann"
    assert users.check("bea", "pw-bcrypt") == "bea"
    assert users.check("cal", "pw-sha") == "cal"
    for user, password in (("ann", "pw-bcrypt"), ("bea", "nope"), ("nobody", "pw-sha")):
        with pytest.raises(AuthenticationFailed):
            users.check(user, password)
    with pytest.raises(AuthConfigError, match="dan"):
        Htpasswd.parse("dan:plaintext\n")


def test_authenticator_methods_and_anonymous(tmp_path):
    key = create_secret_key()
    htpasswd = base64.b64encode(f"ann:{apr1(b'pw', b'saltsalt')}\n".encode()).decode()
    settings = AuthSettings(enabled=True, providers=(
        "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic"),
        token_secret_key="data:;base64," + base64.b64encode(key).decode(), basic_auth_conf=htpasswd)
    auth = Authenticator(settings)
    assert auth.authenticate("token", create_token("alice", secret_key=key).encode()).role == "alice"
    assert auth.authenticate("basic", b"ann:pw").role == "ann"
    with pytest.raises(AuthenticationFailed, match="no credentials"):
        auth.authenticate("none", b"")
    with pytest.raises(AuthenticationFailed, match="tls"):
        auth.authenticate("tls", b"")
    basic = "Basic " + base64.b64encode(b"ann:pw").decode()
    assert auth.authenticate_http(basic).role == "ann"
    assert auth.authenticate_http("Bearer " + create_token("alice", secret_key=key)).role == "alice"
    anonymous = Authenticator(AuthSettings(enabled=True, providers=("token",), token_secret_key=settings.token_secret_key,
                                           anonymous_user_role="guest"))
    assert anonymous.authenticate_http(None).role == "guest"


def test_unknown_provider_and_missing_keys_are_refused():
    with pytest.raises(AuthConfigError, match="AuthenticationProviderSasl"):
        Authenticator(AuthSettings(enabled=True, providers=(
            "org.apache.pulsar.broker.authentication.AuthenticationProviderSasl",)))
    with pytest.raises(AuthConfigError, match="tokenSecretKey"):
        Authenticator(AuthSettings(enabled=True, providers=("token",)))
    with pytest.raises(AuthConfigError, match="basicAuthConf"):
        Authenticator(AuthSettings(enabled=True, providers=("basic",)))
