"""Authentication shared by every protocol: tokens (JWT), htpasswd files, providers."""

from .errors import AuthConfigError, AuthenticationFailed, AuthError
from .providers import AuthSettings, Authenticator, Identity

__all__ = ["AuthConfigError", "AuthError", "AuthSettings", "AuthenticationFailed", "Authenticator", "Identity"]
