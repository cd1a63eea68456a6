"""Authentication providers: credentials in, a role out.

``AuthSettings`` holds the configuration as Pulsar names it (``authenticationEnabled``,
``authenticationProviders`` ...); ``Authenticator(settings)`` loads keys and password
files once and answers ``authenticate(method, data)`` with an ``Identity``. Method names
are the Pulsar clients': ``token`` (data: the JWT), ``basic`` (data: ``user:password``)
and ``tls`` (the verified client certificate's CN). HTTP requests map their
``Authorization`` header onto the same methods.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from .errors import AuthConfigError, AuthenticationFailed
from .htpasswd import Htpasswd
from .keys import read_value
from .tokens import TokenValidator

_PULSAR_PACKAGE = "org.apache.pulsar.broker.authentication."
#: Pulsar's provider class names (and short names) -> the method each serves.
PROVIDER_CLASSES = {
    _PULSAR_PACKAGE + "AuthenticationProviderToken": "token",
    _PULSAR_PACKAGE + "AuthenticationProviderBasic": "basic",
    _PULSAR_PACKAGE + "AuthenticationProviderTls": "tls",
    "token": "token", "basic": "basic", "tls": "tls",
}
#: Method names a client sends when it has no credentials.
NO_CREDENTIALS = ("", "none")


@dataclass(frozen=True)
class AuthSettings:
    """Authentication configuration, under Pulsar's names (see ``nereus standalone --help``)."""

    enabled: bool = False  # authenticationEnabled
    providers: tuple[str, ...] = ()  # authenticationProviders: class names or token/basic/tls
    token_secret_key: str | None = None  # tokenSecretKey
    token_public_key: str | None = None  # tokenPublicKey
    token_auth_claim: str = "sub"  # tokenAuthClaim
    basic_auth_conf: str | None = None  # basicAuthConf
    anonymous_user_role: str | None = None  # anonymousUserRole
    super_user_roles: tuple[str, ...] = ()  # superUserRoles (used by authorization)
    refresh_check_seconds: float = 60.0  # authenticationRefreshCheckSeconds
    authenticate_metrics: bool = False  # authenticateMetricsEndpoint
    authorization_enabled: bool = False  # authorizationEnabled (needs authentication)
    authorization_wildcards: bool = False  # authorizationAllowWildcardsMatching


def split_list(text: str | None) -> tuple[str, ...]:
    """A comma-separated setting as a tuple (blanks dropped)."""
    return tuple(item.strip() for item in (text or "").split(",") if item.strip())


def provider_methods(providers: tuple[str, ...]) -> tuple[str, ...]:
    """The methods of Pulsar provider class names; ``AuthConfigError`` for one Nereus has no provider for."""
    methods = []
    for name in providers:
        method = PROVIDER_CLASSES.get(name)
        if method is None:
            known = ", ".join(k for k in PROVIDER_CLASSES if "." in k)
            raise AuthConfigError(f"authenticationProviders: no provider for {name} (supported: {known})")
        if method not in methods:
            methods.append(method)
    return tuple(methods)


@dataclass(frozen=True)
class Identity:
    """Who a connection or request is: its role, the method that proved it, when that proof expires."""

    role: str
    method: str
    expires_at: float | None = None


class Authenticator:
    """The enabled providers, loaded from ``AuthSettings`` (keys and htpasswd read once, at start-up)."""

    def __init__(self, settings: AuthSettings) -> None:
        self.settings = settings
        self.methods = provider_methods(settings.providers)
        if not self.methods and not settings.anonymous_user_role:
            raise AuthConfigError("authenticationEnabled needs authenticationProviders (or anonymousUserRole)")
        self.tokens: TokenValidator | None = None
        self.htpasswd: Htpasswd | None = None
        if "token" in self.methods:
            self.tokens = TokenValidator.from_settings(secret_key=settings.token_secret_key,
                                                       public_key=settings.token_public_key,
                                                       role_claim=settings.token_auth_claim)
        if "basic" in self.methods:
            if not settings.basic_auth_conf:
                raise AuthConfigError("the basic provider needs basicAuthConf (an htpasswd file or base64 data)")
            raw = read_value(settings.basic_auth_conf, "basicAuthConf")
            try:
                self.htpasswd = Htpasswd.parse(raw.decode("utf-8"))
            except UnicodeDecodeError:
                raise AuthConfigError("basicAuthConf is not an htpasswd text file") from None

    @property
    def anonymous_role(self) -> str | None:
        return self.settings.anonymous_user_role

    def authenticate(self, method: str | None, data: bytes | None, *, peer_cn: str | None = None) -> Identity:
        """The identity ``data`` proves under ``method``; ``AuthenticationFailed`` saying why not."""
        method = (method or "").strip()
        if method in NO_CREDENTIALS and not data:
            if self.anonymous_role:
                return Identity(self.anonymous_role, "anonymous")
            raise AuthenticationFailed("authentication is required and no credentials were given")
        if method not in self.methods:
            # As Pulsar's broker: a method no provider serves is the anonymous role when there is
            # one (authorization then decides), and a refusal only when there is none.
            if self.anonymous_role:
                return Identity(self.anonymous_role, "anonymous")
            raise AuthenticationFailed(f"no authentication provider for method {method!r} "
                                       f"(enabled: {', '.join(self.methods) or 'none'})")
        if method == "token":
            token = self.tokens.validate(data or b"")
            return Identity(token.role, "token", token.expires_at)
        if method == "basic":
            user, sep, password = (data or b"").decode("utf-8", "replace").partition(":")
            if not sep:
                raise AuthenticationFailed("basic credentials are not user:password")
            return Identity(self.htpasswd.check(user, password), "basic")
        if peer_cn is None:
            raise AuthenticationFailed("tls authentication needs a TLS listener and a client certificate")
        return Identity(peer_cn, "tls")

    def authenticate_http(self, authorization: str | None, *, peer_cn: str | None = None) -> Identity:
        """The identity of an HTTP request from its ``Authorization`` header (Bearer or Basic)."""
        scheme, _, value = (authorization or "").strip().partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            return self.authenticate("token", value.strip().encode())
        if scheme == "basic":
            try:
                pair = base64.b64decode(value.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise AuthenticationFailed("the Basic credentials are not base64") from None
            return self.authenticate("basic", pair)
        if scheme:
            raise AuthenticationFailed(f"unsupported Authorization scheme {scheme!r} (use Bearer or Basic)")
        if peer_cn is not None and "tls" in self.methods:
            return self.authenticate("tls", None, peer_cn=peer_cn)
        return self.authenticate(None, None)


__all__ = ["AuthSettings", "Authenticator", "Identity", "PROVIDER_CLASSES", "provider_methods",
           "split_list"]
