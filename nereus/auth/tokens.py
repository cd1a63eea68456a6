"""JSON Web Tokens as Pulsar's token authentication uses them (protocol-neutral).

A token is a JWT signed with HS256/384/512 over a secret key's raw bytes, or with
RS256/384/512 / ES256/384/512 with a private key; the broker checks it with the secret
key or the public key. The role is the ``sub`` claim (``tokenAuthClaim``); ``exp`` is
honoured with no clock skew allowed (Pulsar's default). Keys are raw bytes as Pulsar's
``tokens create-secret-key`` / ``create-key-pair`` write them (DER for asymmetric keys;
PEM is read too), so tokens made by either tool are accepted by the other.

``TokenValidator(secret_key=..., public_key=...).validate(token) -> Token`` is the check
used by the Pulsar token provider and by Kafka's SASL/OAUTHBEARER.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass, field

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from .errors import AuthConfigError, AuthenticationFailed
from .keys import read_value

HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
RSA_ALGORITHMS = ("RS256", "RS384", "RS512")
EC_ALGORITHMS = ("ES256", "ES384", "ES512")
ASYMMETRIC_ALGORITHMS = RSA_ALGORITHMS + EC_ALGORITHMS
_SECRET_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
_CURVES = {"ES256": ec.SECP256R1, "ES384": ec.SECP384R1, "ES512": ec.SECP521R1}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


@dataclass(frozen=True)
class Token:
    """A validated token: its role, expiry (epoch seconds, None: never) and all claims."""

    role: str
    expires_at: float | None
    claims: dict = field(default_factory=dict)


def parse_duration(text: str) -> int:
    """Seconds of a relative time as Pulsar writes it: ``30s``, ``10m``, ``1h``, ``7d``, ``2w``, ``1y``."""
    match = re.fullmatch(r"\s*(\d+)\s*([smhdwy]?)\s*", text)
    if match is None:
        raise ValueError(f"invalid time {text!r}: expected a number and a unit among s, m, h, d, w, y")
    return int(match.group(1)) * _UNITS[match.group(2) or "s"]


def create_secret_key(algorithm: str = "HS256") -> bytes:
    """Random raw key bytes for an HMAC algorithm (as long as the hash, as Pulsar makes them)."""
    if algorithm not in _SECRET_BYTES:
        raise AuthConfigError(f"unsupported secret key algorithm {algorithm}: use one of {', '.join(HMAC_ALGORITHMS)}")
    return secrets.token_bytes(_SECRET_BYTES[algorithm])


def create_key_pair(algorithm: str = "RS256") -> tuple[bytes, bytes]:
    """``(private key PKCS#8 DER, public key X.509 DER)`` for an RSA or EC algorithm."""
    if algorithm in RSA_ALGORITHMS:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    elif algorithm in EC_ALGORITHMS:
        private = ec.generate_private_key(_CURVES[algorithm]())
    else:
        raise AuthConfigError(f"unsupported key pair algorithm {algorithm}: use one of "
                              f"{', '.join(ASYMMETRIC_ALGORITHMS)}")
    return (private.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()),
            private.public_key().public_bytes(serialization.Encoding.DER,
                                              serialization.PublicFormat.SubjectPublicKeyInfo))


def load_private_key(data: bytes):
    """A private key from DER (PKCS#8, as Pulsar writes it) or PEM bytes."""
    try:
        if data.lstrip().startswith(b"-----"):
            return serialization.load_pem_private_key(data, password=None)
        return serialization.load_der_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise AuthConfigError(f"not a private key (DER or PEM): {exc}") from None


def load_public_key(data: bytes):
    """A public key from DER (X.509 SubjectPublicKeyInfo, as Pulsar writes it) or PEM bytes."""
    try:
        if data.lstrip().startswith(b"-----"):
            return serialization.load_pem_public_key(data)
        return serialization.load_der_public_key(data)
    except (ValueError, TypeError) as exc:
        raise AuthConfigError(f"not a public key (DER or PEM): {exc}") from None


def _key_algorithms(key) -> tuple[str, ...]:
    return RSA_ALGORITHMS if isinstance(key, (rsa.RSAPrivateKey, rsa.RSAPublicKey)) else EC_ALGORITHMS


def create_token(subject: str, *, secret_key: bytes | None = None, private_key: bytes | None = None,
                 algorithm: str | None = None, expires_in: int | None = None, claims: dict | None = None) -> str:
    """A signed token whose ``sub`` is ``subject`` (and ``exp`` ``expires_in`` seconds from now)."""
    if (secret_key is None) == (private_key is None):
        raise AuthConfigError("sign with either a secret key or a private key")
    payload = {"sub": subject, **(claims or {})}
    if expires_in is not None:
        payload["exp"] = int(time.time()) + expires_in
    if secret_key is not None:
        algorithm = algorithm or "HS256"
        if algorithm not in HMAC_ALGORITHMS:
            raise AuthConfigError(f"a secret key signs with {', '.join(HMAC_ALGORITHMS)}, not {algorithm}")
        key = secret_key
    else:
        key = load_private_key(private_key)
        allowed = _key_algorithms(key)
        algorithm = algorithm or allowed[0]
        if algorithm not in allowed:
            raise AuthConfigError(f"this private key signs with {', '.join(allowed)}, not {algorithm}")
    # Pulsar's tokens carry only "alg" in their header.
    return jwt.encode(payload, key, algorithm=algorithm, headers={"typ": None})


def decode_unverified(token: str) -> tuple[dict, dict]:
    """``(header, claims)`` of a token without checking it (``tokens show``)."""
    try:
        return jwt.get_unverified_header(token), jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError as exc:
        raise AuthenticationFailed(f"malformed token: {exc}") from None


class TokenValidator:
    """Checks tokens against a secret key or a public key (Pulsar's AuthenticationProviderToken)."""

    def __init__(self, *, secret_key: bytes | None = None, public_key: bytes | None = None,
                 role_claim: str = "sub", now=time.time) -> None:
        if (secret_key is None) == (public_key is None):
            raise AuthConfigError("token authentication needs tokenSecretKey or tokenPublicKey (one of them)")
        if secret_key is not None:
            self._key, self._algorithms = secret_key, list(HMAC_ALGORITHMS)
        else:
            self._key = load_public_key(public_key)
            self._algorithms = list(_key_algorithms(self._key))
        self.role_claim = role_claim
        self._now = now

    @classmethod
    def from_settings(cls, *, secret_key: str | None, public_key: str | None,
                      role_claim: str = "sub") -> TokenValidator:
        """From ``tokenSecretKey`` / ``tokenPublicKey`` values (``file:///...``, ``data:;base64,...``)."""
        return cls(secret_key=read_value(secret_key, "tokenSecretKey") if secret_key else None,
                   public_key=read_value(public_key, "tokenPublicKey") if public_key else None,
                   role_claim=role_claim or "sub")

    def validate(self, token: str | bytes) -> Token:
        """The token's role and expiry; ``AuthenticationFailed`` saying why it is refused."""
        if isinstance(token, bytes):
            token = token.decode("utf-8", "replace")
        token = token.strip()
        if not token:
            raise AuthenticationFailed("no token given")
        try:
            claims = jwt.decode(token, self._key, algorithms=self._algorithms,
                                options={"verify_exp": False, "verify_aud": False, "require": []})
        except jwt.InvalidAlgorithmError:
            raise AuthenticationFailed(f"token signed with an algorithm other than {'/'.join(self._algorithms)}") \
                from None
        except jwt.InvalidSignatureError:
            raise AuthenticationFailed("token signature does not match the broker's key") from None
        except jwt.PyJWTError as exc:
            raise AuthenticationFailed(f"invalid token: {exc}") from None
        expires_at = claims.get("exp")
        if expires_at is not None:
            if not isinstance(expires_at, (int, float)):
                raise AuthenticationFailed("invalid token: exp is not a number")
            if expires_at <= self._now():
                raise AuthenticationFailed("token has expired")
        role = claims.get(self.role_claim)
        if not isinstance(role, str) or not role:
            raise AuthenticationFailed(f"token has no {self.role_claim} claim naming a role")
        return Token(role, float(expires_at) if expires_at is not None else None, claims)


__all__ = ["ASYMMETRIC_ALGORITHMS", "EC_ALGORITHMS", "HMAC_ALGORITHMS", "RSA_ALGORITHMS", "Token", "TokenValidator",
           "create_key_pair", "create_secret_key", "create_token", "decode_unverified", "load_private_key",
           "load_public_key", "parse_duration"]
