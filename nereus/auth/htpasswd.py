"""htpasswd files, as Pulsar's basic authentication reads them (``basicAuthConf``).

One ``user:hash`` per line. Hashes: bcrypt (``$2y$``, ``$2a$``, ``$2b$``), Apache MD5
(``$apr1$``) and SHA-1 (``{SHA}``). Other schemes (crypt DES, plain text) are refused
when the file is loaded, naming the user, rather than failing every login later.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import bcrypt

from .errors import AuthConfigError, AuthenticationFailed

_ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _to64(value: int, count: int) -> str:
    out = []
    for _ in range(count):
        out.append(_ITOA64[value & 0x3F])
        value >>= 6
    return "".join(out)


def apr1(password: bytes, salt: bytes) -> str:
    """The ``$apr1$salt$digest`` hash of ``password`` (the MD5-crypt algorithm with Apache's magic)."""
    magic, salt = b"$apr1$", salt[:8]
    digest = hashlib.md5(password + salt + password).digest()
    ctx = password + magic + salt
    for left in range(len(password), 0, -16):
        ctx += digest[:min(16, left)]
    bits = len(password)
    while bits:
        ctx += b"\x00" if bits & 1 else password[:1]
        bits >>= 1
    digest = hashlib.md5(ctx).digest()
    for i in range(1000):  # the algorithm's fixed stretching rounds
        round_input = password if i & 1 else digest
        if i % 3:
            round_input += salt
        if i % 7:
            round_input += password
        round_input += digest if i & 1 else password
        digest = hashlib.md5(round_input).digest()
    d = digest
    text = "".join(_to64((d[a] << 16) | (d[b] << 8) | d[c], 4)
                   for a, b, c in ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)))
    text += _to64(d[11], 2)
    return f"$apr1${salt.decode()}${text}"


def _scheme(stored: str) -> str | None:
    if stored.startswith(("$2y$", "$2a$", "$2b$")):
        return "bcrypt"
    if stored.startswith("$apr1$"):
        return "apr1"
    if stored.startswith("{SHA}"):
        return "sha"
    return None


def check_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches the htpasswd hash ``stored``."""
    secret = password.encode()
    scheme = _scheme(stored)
    if scheme == "bcrypt":
        try:
            return bcrypt.checkpw(secret, stored.encode())
        except ValueError:
            return False
    if scheme == "apr1":
        salt = stored[len("$apr1$"):].split("$", 1)[0].encode()
        return hmac.compare_digest(apr1(secret, salt), stored)
    if scheme == "sha":
        expected = "{SHA}" + base64.b64encode(hashlib.sha1(secret).digest()).decode()
        return hmac.compare_digest(expected, stored)
    return False


class Htpasswd:
    """The users of an htpasswd file; ``check(user, password)`` answers the role (the user)."""

    def __init__(self, users: dict[str, str]) -> None:
        self.users = users

    @classmethod
    def parse(cls, text: str) -> Htpasswd:
        users = {}
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            user, sep, stored = line.partition(":")
            if not sep or not user or not stored:
                raise AuthConfigError(f"basicAuthConf line {number}: expected user:hash")
            if _scheme(stored) is None:
                raise AuthConfigError(f"basicAuthConf line {number}: the hash of user {user} is not bcrypt ($2y$), "
                                      "apr1 ($apr1$) nor SHA ({SHA}); re-create it with htpasswd -B")
            users[user] = stored
        return cls(users)

    def check(self, user: str, password: str) -> str:
        """The role of ``user``; ``AuthenticationFailed`` for an unknown user or a wrong password."""
        stored = self.users.get(user)
        # An unknown user costs a hash check too, so timing does not tell which users exist.
        if not check_password(password, stored or "$apr1$nouser$x") or stored is None:
            raise AuthenticationFailed("unknown user or wrong password")
        return user


__all__ = ["Htpasswd", "apr1", "check_password"]
