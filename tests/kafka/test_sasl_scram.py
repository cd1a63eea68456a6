"""The SCRAM server against RFC 7677's SCRAM-SHA-256 example, and its refusals."""

from __future__ import annotations

import base64

import pytest

from nereus.kafka.server.security.scram import (ScramError, ScramServer, check_password, credential_from_password,
                                            salted_password)

CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")


def _server(password: str = "pencil") -> tuple[ScramServer, object]:
    credential = credential_from_password("SCRAM-SHA-256", password, salt=SALT, iterations=4096)
    return ScramServer("SCRAM-SHA-256", nonce=SERVER_NONCE), credential


def test_rfc7677_exchange() -> None:
    server, credential = _server()
    assert server.client_first(CLIENT_FIRST) == "user"
    assert server.server_first(credential) == SERVER_FIRST
    assert server.client_final(CLIENT_FINAL) == SERVER_FINAL
    assert credential.stored_key != salted_password("SCRAM-SHA-256", "pencil", SALT, 4096)


def test_wrong_password_is_refused() -> None:
    server, credential = _server("not-pencil")
    server.client_first(CLIENT_FIRST)
    server.server_first(credential)
    with pytest.raises(ScramError, match="invalid credentials"):
        server.client_final(CLIENT_FINAL)


@pytest.mark.parametrize("final", [
    CLIENT_FINAL.replace(b"r=rOprNGfwEbeRWgbNEkqO%", b"r=rOprNGfwEbeRWgbNEkqX%"),  # another nonce
    CLIENT_FINAL.replace(b"c=biws", b"c=eSws"),  # channel binding flag differs
    b"c=biws,p=abc",
    b"garbage",
])
def test_tampered_final_message_is_refused(final: bytes) -> None:
    server, credential = _server()
    server.client_first(CLIENT_FIRST)
    server.server_first(credential)
    with pytest.raises(ScramError):
        server.client_final(final)


@pytest.mark.parametrize("first", [b"p=tls-unique,,n=user,r=abc", b"n,,n=us=er,r=abc", b"n,,r=abc", b"\xff"])
def test_malformed_first_message_is_refused(first: bytes) -> None:
    with pytest.raises(ScramError):
        ScramServer("SCRAM-SHA-512").client_first(first)


def test_escaped_user_name_and_plain_check() -> None:
    assert ScramServer("SCRAM-SHA-512").client_first(b"n,,n=a=2Cb=3Dc,r=xyz") == "a,b=c"
    credential = credential_from_password("SCRAM-SHA-512", "secret")
    assert check_password("SCRAM-SHA-512", credential, "secret")
    assert not check_password("SCRAM-SHA-512", credential, "Secret")
