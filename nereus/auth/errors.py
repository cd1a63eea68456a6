"""Errors of authentication (one root)."""

from __future__ import annotations


class AuthError(Exception):
    """Root of the authentication errors."""


class AuthenticationFailed(AuthError):
    """The credentials were refused (wrong signature, expired token, unknown user, wrong password ...)."""


class AuthConfigError(AuthError, ValueError):
    """An authentication setting is not valid (unknown provider, unreadable key, bad htpasswd line)."""


__all__ = ["AuthConfigError", "AuthError", "AuthenticationFailed"]
