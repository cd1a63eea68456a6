"""The admin REST client: one call per request, errors as one line (``AdminCliError``).

Plain ``urllib``: the command runs without an event loop and starts fast. A 307/308
(a topic's owner is another broker of the cluster) is followed with the same method
and body, as ``pulsar-admin`` does; urllib alone would refuse it for PUT and POST.
"""

from __future__ import annotations

import json
import socket
import ssl
import urllib.error
import urllib.request
from urllib.parse import urlencode, urljoin, urlsplit

import click

#: Redirects followed for one call (an owner's owner moved meanwhile: a few hops at most).
MAX_REDIRECTS = 5
#: What a failed call's status means, said first on its one line.
STATUS_WORDS = {400: "bad request", 401: "unauthorized", 403: "forbidden", 404: "not found",
                405: "not allowed", 409: "conflict", 412: "precondition failed", 422: "invalid",
                500: "server error", 501: "not implemented", 502: "bad gateway", 503: "unavailable"}


class AdminCliError(click.ClickException):
    """A failed command: shown as its one-line message on stderr, exit code 1."""

    exit_code = 1

    def show(self, file=None) -> None:
        click.echo(self.message, err=True)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None  # answered as an HTTPError: followed by AdminClient with the method kept


def _reason(body: bytes) -> str:
    """Pulsar's ``{"reason": ...}`` (or the raw body), on one line."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        value = json.loads(text)
    except ValueError:
        value = text
    if isinstance(value, dict) and "reason" in value:
        value = value["reason"]
    return " ".join(str(value).split())


class AdminClient:
    """Calls ``{url}/admin/v2...`` with the auth headers; answers decoded JSON (None for an empty body)."""

    def __init__(self, url: str, *, headers: dict[str, str] | None = None, timeout: float = 60.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise AdminCliError(f"invalid admin URL {url!r}: expected http://host:port")
        self.url = url.rstrip("/")
        self.headers = dict(headers or {})
        self.timeout = timeout
        handlers = [_NoRedirect()]
        if ssl_context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ssl_context))
        self._opener = urllib.request.build_opener(*handlers)

    def call(self, method: str, path: str, body=None, *, query: dict | None = None, raw: bool = False):
        """The decoded answer; ``raw``: (response headers, body bytes) instead."""
        url = f"{self.url}/admin/v2{path}"
        if query:
            url += "?" + urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        for _ in range(MAX_REDIRECTS + 1):
            headers = {"Accept": "application/json", **self.headers}
            if data is not None:
                headers["Content-Type"] = "application/json"
            request = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with self._opener.open(request, timeout=self.timeout) as response:
                    content = response.read()
                    if raw:
                        return dict(response.headers.items()), content
            except urllib.error.HTTPError as exc:
                location = exc.headers.get("Location")
                if exc.code in (307, 308) and location:
                    url = urljoin(url, location)
                    continue
                word = STATUS_WORDS.get(exc.code, f"HTTP {exc.code}")
                raise AdminCliError(f"{word}: {_reason(exc.read()) or exc.reason}") from None
            except (urllib.error.URLError, socket.timeout, ConnectionError) as exc:
                why = getattr(exc, "reason", exc)
                if isinstance(why, ssl.SSLCertVerificationError):
                    raise AdminCliError(f"cannot reach {self.url}: certificate verify failed: {why.verify_message} "
                                        "(a private CA: --tls-trust-cert-path CA_FILE)") from None
                raise AdminCliError(f"cannot reach {self.url}: {why}") from None
            if not content.strip():
                return None
            try:
                return json.loads(content)
            except ValueError:
                return content.decode("utf-8", errors="replace").strip()
        raise AdminCliError(f"too many redirects for {method} {path}")

    def get(self, path: str, **kw):
        return self.call("GET", path, **kw)

    def put(self, path: str, body=None, **kw):
        return self.call("PUT", path, body, **kw)

    def post(self, path: str, body=None, **kw):
        return self.call("POST", path, body, **kw)

    def delete(self, path: str, **kw):
        return self.call("DELETE", path, **kw)


__all__ = ["AdminCliError", "AdminClient"]
