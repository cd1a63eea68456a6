"""SASL on a Kafka listener: the per-connection state and the mechanisms.

Rules (Kafka's SaslServerAuthenticator, KIP-43/KIP-152):

* Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are
  served; any other request closes the connection.
* SaslHandshake names a mechanism: one not enabled gets UNSUPPORTED_SASL_MECHANISM
  with the enabled ones listed. v0 is followed by raw length-framed SASL tokens,
  v1 by SaslAuthenticate requests (ILLEGAL_SASL_STATE without a handshake first).
* A failed exchange answers SASL_AUTHENTICATION_FAILED (nothing for raw tokens)
  and closes the connection.
* The session lasts until the credential expires (an OAUTHBEARER token's ``exp``),
  told as ``session_lifetime_ms``; a client re-authenticates with a new handshake
  on the same connection (KIP-368), else the connection is closed at its next
  request after expiry.

PLAIN checks ``user``/``password`` against the SCRAM credentials of the user (so one
``nereus kafka-user`` or AlterUserScramCredentials serves both), or, as KoP does, a
password ``token:<jwt>`` against the token validator (the role is the token's subject).
OAUTHBEARER (RFC 7628) reads ``n,,\\x01auth=Bearer <jwt>\\x01\\x01``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

from .scram import MECHANISM_IDS, ScramError, ScramServer, check_password

log = logging.getLogger(__name__)

ALL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
DEFAULT_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslFailed(Exception):
    """The client's credentials were refused (the message goes back to the client)."""


class ValidatedToken(Protocol):
    role: str
    expires_at: float | None  # epoch seconds; None: never


class TokenValidator(Protocol):
    """Checks a JWT (the Pulsar token provider's keys); raises on a bad or expired token."""

    def validate(self, token: str) -> ValidatedToken: ...


@dataclass(frozen=True)
class SaslSettings:
    """A SASL listener's mechanisms, where SCRAM credentials live and how tokens are checked."""

    mechanisms: tuple[str, ...] = DEFAULT_MECHANISMS
    tokens: TokenValidator | None = None

    def __post_init__(self) -> None:
        unknown = [m for m in self.mechanisms if m not in ALL_MECHANISMS]
        if unknown or not self.mechanisms:
            raise ValueError(f"unknown SASL mechanism(s) {', '.join(unknown) or '(none given)'}: "
                             f"expected some of {', '.join(ALL_MECHANISMS)}")
        if "OAUTHBEARER" in self.mechanisms and self.tokens is None:
            raise ValueError("OAUTHBEARER needs a token key (tokenSecretKey or tokenPublicKey)")


def parse_mechanisms(text: str) -> tuple[str, ...]:
    """``saslAllowedMechanisms``: a comma-separated list, checked."""
    mechanisms = tuple(dict.fromkeys(m.strip().upper() for m in text.split(",") if m.strip()))
    unknown = [m for m in mechanisms if m not in ALL_MECHANISMS]
    if unknown or not mechanisms:
        raise ValueError(f"expected some of {', '.join(ALL_MECHANISMS)}")
    return mechanisms


class _Plain:
    def __init__(self, session: SaslSession) -> None:
        self.session = session

    async def step(self, token: bytes) -> tuple[bytes, bool]:
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise SaslFailed("malformed PLAIN message")
        try:
            authzid, user, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise SaslFailed("PLAIN message is not UTF-8") from None
        if not user or (authzid and authzid != user):
            raise SaslFailed("authorization id differs from the user name" if user else "empty user name")
        if password.startswith("token:") and self.session.settings.tokens is not None:
            self.session.accept_token(password[len("token:"):])
            return b"", True
        creds = await self.session.scram.get(user)
        if not any(check_password(mech, cred, password) for mech, cred in creds.items()):
            raise SaslFailed(f"Authentication failed: Invalid username or password for {user}")
        self.session.principal = user
        return b"", True


class _Scram:
    def __init__(self, session: SaslSession, mechanism: str) -> None:
        self.session = session
        self.mechanism = mechanism
        self.server = ScramServer(mechanism)
        self.round = 0

    async def step(self, token: bytes) -> tuple[bytes, bool]:
        self.round += 1
        try:
            if self.round == 1:
                user = self.server.client_first(token)
                credential = (await self.session.scram.get(user)).get(self.mechanism)
                if credential is None:
                    raise SaslFailed(f"Authentication failed during authentication due to invalid credentials "
                                     f"with SASL mechanism {self.mechanism}")
                return self.server.server_first(credential), False
            if self.round == 2:
                final = self.server.client_final(token)
                self.session.principal = self.server.user
                return final, True
        except ScramError as exc:
            raise SaslFailed(f"Authentication failed during authentication due to invalid credentials with SASL "
                             f"mechanism {self.mechanism}: {exc}") from None
        raise SaslFailed("unexpected SCRAM message")


class _OAuthBearer:
    def __init__(self, session: SaslSession) -> None:
        self.session = session

    async def step(self, token: bytes) -> tuple[bytes, bool]:
        if token == b"\x01":  # the client's acknowledgement of an error challenge (RFC 7628 3.2.3)
            raise SaslFailed("OAUTHBEARER token refused")
        try:
            gs2, sep, rest = token.decode().partition("\x01")
        except UnicodeDecodeError:
            raise SaslFailed("malformed OAUTHBEARER message") from None
        if not sep or not gs2.startswith(("n,", "y,")) or not rest.endswith("\x01\x01"):
            raise SaslFailed("malformed OAUTHBEARER message")
        fields = dict(kv.partition("=")[::2] for kv in rest[:-2].split("\x01") if kv)
        scheme, _, jwt = fields.get("auth", "").partition(" ")
        if scheme.lower() != "bearer" or not jwt.strip():
            raise SaslFailed("OAUTHBEARER message without auth=Bearer <token>")
        self.session.accept_token(jwt.strip())
        return b"", True


class SaslSession:
    """The SASL state of one connection (see the module rules)."""

    def __init__(self, scram, settings: SaslSettings) -> None:
        self.scram = scram  # ScramStore: the users' credentials (PLAIN checks them too)
        self.settings = settings
        self.mechanism: str | None = None
        self.raw_tokens = False  # after a v0 handshake: the next frames are bare SASL tokens
        self.principal: str | None = None
        self.authenticated = False
        self.expires_at: float | None = None  # epoch seconds
        self._exchange = None

    def handshake(self, mechanism: str, version: int) -> bool:
        """Start an exchange; False when ``mechanism`` is not enabled."""
        if mechanism not in self.settings.mechanisms:
            return False
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        if mechanism == "PLAIN":
            self._exchange = _Plain(self)
        elif mechanism in MECHANISM_IDS:
            self._exchange = _Scram(self, mechanism)
        else:
            self._exchange = _OAuthBearer(self)
        return True

    @property
    def in_exchange(self) -> bool:
        return self._exchange is not None

    async def step(self, token: bytes) -> bytes:
        """One client token in, the server's token out; raises ``SaslFailed`` (the exchange is over)."""
        if self._exchange is None:
            raise SaslFailed("no SASL exchange in progress")
        previous = self.principal
        try:
            response, done = await self._exchange.step(token)
        except SaslFailed:
            self._exchange = None
            raise
        if done:
            if self.authenticated and previous != self.principal:  # KIP-368: re-authentication keeps the principal
                self._exchange = None
                raise SaslFailed(f"re-authentication as {self.principal} on a connection of {previous}")
            self._exchange, self.raw_tokens, self.authenticated = None, False, True
            log.debug("kafka: authenticated %s with %s", self.principal, self.mechanism)
        return response

    def accept_token(self, jwt: str) -> None:
        try:
            token = self.settings.tokens.validate(jwt)
        except Exception as exc:  # the validator's own error types: each is a refusal
            raise SaslFailed(f"Authentication failed: invalid token: {exc}") from None
        self.principal = token.role
        self.expires_at = token.expires_at

    def session_lifetime_ms(self) -> int:
        if self.expires_at is None:
            return 0
        return max(1, int((self.expires_at - time.time()) * 1000))

    def expired(self) -> bool:
        return self.expires_at is not None and time.time() >= self.expires_at and not self.in_exchange


__all__ = ["ALL_MECHANISMS", "DEFAULT_MECHANISMS", "SaslFailed", "SaslSession", "SaslSettings", "TokenValidator",
           "parse_mechanisms"]
