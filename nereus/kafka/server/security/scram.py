"""SCRAM (RFC 5802, RFC 7677) for Kafka's SCRAM-SHA-256 and SCRAM-SHA-512: credentials and the server side.

Sans-io. A credential is what the broker keeps per user and mechanism: salt,
iterations, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey =
HMAC(SaltedPassword, "Server Key"); never the password nor the salted password.
``ScramServer`` runs one exchange: ``client_first(msg) -> user``, then (once the
caller looked the credential up) ``server_first(credential) -> msg`` and
``client_final(msg) -> server-final msg``; a refused proof raises ``ScramError``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass

# Kafka's ScramMechanism ids (DescribeUserScramCredentials / AlterUserScramCredentials).
MECHANISM_IDS = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {v: k for k, v in MECHANISM_IDS.items()}
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka's lower bound (RFC 7677 recommends at least 4096)
MAX_ITERATIONS = 16384  # Kafka's upper bound


class ScramError(Exception):
    """The SCRAM exchange failed (malformed message, unknown user or wrong proof)."""


@dataclass(frozen=True)
class ScramCredential:
    """What the broker stores for one user and mechanism."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    def to_json(self) -> dict:
        b64 = base64.b64encode
        return {"salt": b64(self.salt).decode(), "iterations": self.iterations,
                "stored_key": b64(self.stored_key).decode(), "server_key": b64(self.server_key).decode()}

    @classmethod
    def from_json(cls, obj: dict) -> ScramCredential:
        b64 = base64.b64decode
        return cls(b64(obj["salt"]), int(obj["iterations"]), b64(obj["stored_key"]), b64(obj["server_key"]))


def _hash(mechanism: str) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r} (expected SCRAM-SHA-256 or SCRAM-SHA-512)") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i): PBKDF2-HMAC with the mechanism's hash."""
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode(), salt, iterations)


def credential_from_salted(mechanism: str, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The stored form of a salted password (what AlterUserScramCredentials sends)."""
    name = _hash(mechanism)
    client_key = hmac.digest(salted, b"Client Key", name)
    return ScramCredential(salt, iterations, hashlib.new(name, client_key).digest(),
                           hmac.digest(salted, b"Server Key", name))


def credential_from_password(mechanism: str, password: str, *, iterations: int = MIN_ITERATIONS,
                             salt: bytes | None = None) -> ScramCredential:
    salt = os.urandom(32) if salt is None else salt
    return credential_from_salted(mechanism, salt, salted_password(mechanism, password, salt, iterations), iterations)


def check_password(mechanism: str, credential: ScramCredential, password: str) -> bool:
    """Whether ``password`` is the one ``credential`` was made from (SASL/PLAIN against the SCRAM store)."""
    again = credential_from_salted(mechanism, credential.salt,
                                   salted_password(mechanism, password, credential.salt, credential.iterations),
                                   credential.iterations)
    return hmac.compare_digest(again.stored_key, credential.stored_key)


def _saslname(text: str) -> str:
    """RFC 5802 saslname: ``=2C`` is ',' and ``=3D`` is '='; any other '=' is malformed."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "=":
            code = text[i + 1:i + 3]
            if code not in ("2C", "3D"):
                raise ScramError("malformed user name")
            out.append("," if code == "2C" else "=")
            i += 3
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _attributes(text: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed SCRAM attribute {part[:20]!r}")
        out.append((part[0], part[2:]))
    return out


class ScramServer:
    """One server-side SCRAM exchange (see the module docstring)."""

    def __init__(self, mechanism: str, *, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._hash = _hash(mechanism)
        self._server_nonce = nonce or base64.b64encode(os.urandom(24)).decode()
        self.user: str | None = None
        self._client_first_bare = ""
        self._gs2_header = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None

    def client_first(self, message: bytes) -> str:
        """Parse client-first-message; returns the user name to look the credential up for."""
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise ScramError("client-first-message is not UTF-8") from None
        gs2, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y"):
            raise ScramError("channel binding is not supported" if gs2.startswith("p=") else
                             "malformed client-first-message")
        attrs = _attributes(bare)
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramError("malformed client-first-message")
        if any(k == "m" for k, _ in attrs):
            raise ScramError("mandatory extensions are not supported")
        user = _saslname(attrs[0][1])
        if authzid and authzid != f"a={attrs[0][1]}":
            raise ScramError("authorization id differs from the user name")
        if not user:
            raise ScramError("empty user name")
        self.user = user
        self._client_first_bare = bare
        self._gs2_header = text[:len(text) - len(bare)]
        self._nonce = attrs[1][1] + self._server_nonce
        return user

    def server_first(self, credential: ScramCredential) -> bytes:
        self._credential = credential
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def client_final(self, message: bytes) -> bytes:
        """Verify client-final-message's proof; returns server-final-message (``v=ServerSignature``)."""
        if self._credential is None:
            raise ScramError("client-final-message before server-first-message")
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise ScramError("client-final-message is not UTF-8") from None
        attrs = _attributes(text)
        without_proof, _, _ = text.rpartition(",p=")
        values = dict(attrs)
        if len(attrs) < 3 or attrs[0][0] != "c" or attrs[1][0] != "r" or attrs[-1][0] != "p" or not without_proof:
            raise ScramError("malformed client-final-message")
        if values["c"] != base64.b64encode(self._gs2_header.encode()).decode():
            raise ScramError("channel binding differs from client-first-message")
        if values["r"] != self._nonce:
            raise ScramError("nonce mismatch")
        try:
            proof = base64.b64decode(values["p"], validate=True)
        except (binascii.Error, ValueError):
            raise ScramError("malformed client proof") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(self._credential.stored_key, auth_message, self._hash)
        if len(proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), self._credential.stored_key):
            raise ScramError("invalid credentials")
        server_signature = hmac.digest(self._credential.server_key, auth_message, self._hash)
        return b"v=" + base64.b64encode(server_signature)


__all__ = ["MECHANISM_IDS", "MECHANISM_NAMES", "MAX_ITERATIONS", "MIN_ITERATIONS", "ScramCredential", "ScramError",
           "ScramServer", "check_password", "credential_from_password", "credential_from_salted",
           "salted_password"]
