"""S3 (and S3-compatible) object store via ``obstore`` (``s3://bucket[/prefix]``).

put-if-absent is a conditional PUT (``If-None-Match: *``, obstore's ``mode="create"``).
A store that ignores that header would silently overwrite, so by default the first
put of each instance probes the endpoint once and refuses to work if it does.

Caveat shared by every conditional-put client: if a PUT landed but its response was
lost and obstore retried it, the retry reports ``ObjectExists`` although the object
holds this very data. Callers that must tell the two apart compare contents.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from obstore.exceptions import AlreadyExistsError, BaseError, NotSupportedError
from obstore.store import S3Store

from nereus.objstore._common import Payload, as_chunks, check_range, validate_key
from nereus.objstore._exit_guard import call as obstore_call
from nereus.objstore.api import ObjectInfo, ObjectStore
from nereus.objstore.errors import ObjectExists, ObjectNotFound, ObjectStoreError, UnsupportedStoreUrl
from nereus.tasks import wait_for

#: option -> environment variables consulted when the option is not given.
ENV_FALLBACKS: dict[str, tuple[str, ...]] = {
    "endpoint": ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
    "access_key_id": ("AWS_ACCESS_KEY_ID",),
    "secret_access_key": ("AWS_SECRET_ACCESS_KEY",),
    "session_token": ("AWS_SESSION_TOKEN",),
    "allow_http": ("AWS_ALLOW_HTTP",),
}
#: ``retry_timeout``: seconds after which a failing request is not retried again (and each
#: request's own time limit); obstore's default is 3 minutes of retries.
OPTIONS = frozenset(ENV_FALLBACKS) | {"verify_conditional_put", "retry_timeout"}
_BOOL_OPTIONS = ("allow_http", "verify_conditional_put")

# AWS answers 409 ConditionalRequestConflict when conditional writes to one key race;
# the documented remedy is to retry (the retry then wins or gets 412).
_CONFLICT_RETRIES = 5
_CONFLICT_BACKOFF = 0.05  # seconds, doubled per retry
_PROBE_CLEANUP_SECONDS = 2.0


def url_options(url: str) -> dict[str, str]:
    """The options of an ``s3://`` URL's query, over those the ``AWS_*`` variables give."""
    merged: dict[str, str] = {}
    for name, envs in ENV_FALLBACKS.items():
        for env in envs:
            if os.environ.get(env):
                merged[name] = os.environ[env]
                break
    merged.update(parse_qsl(urlsplit(url).query))
    return merged


def _parse_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise UnsupportedStoreUrl(f"option {name}={value!r} is not a boolean")


def _short(exc: BaseException) -> str:
    # obstore messages carry a multi-line debug dump; the first line says what happened.
    return str(exc).split("\n", 1)[0]


class S3ObjectStore(ObjectStore):
    """Objects in ``bucket`` under ``prefix``.

    ``client`` replaces the obstore ``S3Store`` (tests only).
    """

    hedge_slow_puts = True  # AWS's advice for latency-sensitive clients: retry slow requests

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint: str | None = None,
        region: str | None = None,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
        session_token: str | None = None,
        allow_http: bool | None = None,
        verify_conditional_put: bool = True,
        retry_timeout: float | None = None,
        client: Any = None,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.endpoint = endpoint
        if client is None:
            config = {
                k: v
                for k, v in (
                    ("endpoint", endpoint),
                    ("region", region),
                    ("access_key_id", access_key_id),
                    ("secret_access_key", secret_access_key),
                    ("session_token", session_token),
                )
                if v
            }
            if allow_http is None:  # an http:// endpoint is an explicit request for plain HTTP
                allow_http = bool(endpoint and endpoint.startswith("http://"))
            client_options: dict[str, Any] = {"allow_http": allow_http}
            retry_config = None
            if retry_timeout is not None:
                limit = timedelta(seconds=float(retry_timeout))
                client_options.update(timeout=limit, connect_timeout=limit)
                retry_config = {"retry_timeout": limit}
            client = S3Store(
                bucket,
                prefix=self.prefix or None,
                config=config,
                client_options=client_options,
                retry_config=retry_config,
            )
        self._client: Any = client
        # None: not probed yet; True: conditional put works; False: endpoint ignores it.
        self._conditional_put_ok: bool | None = None if verify_conditional_put else True

    @classmethod
    def from_url(cls, url: str, **options: Any) -> "S3ObjectStore":
        """``s3://bucket[/prefix][?option=value...]``; keyword options beat query ones, which beat AWS_* env vars."""
        parts = urlsplit(url)
        if not parts.netloc:
            raise UnsupportedStoreUrl(f"S3 URL {url!r} has no bucket (expected s3://bucket[/prefix])")
        merged: dict[str, Any] = url_options(url)
        merged.update(options)
        unknown = set(merged) - OPTIONS
        if unknown:
            raise UnsupportedStoreUrl(
                f"unknown option(s) {sorted(unknown)} for {url!r}; known: {sorted(OPTIONS)}"
            )
        for name in _BOOL_OPTIONS:
            if name in merged:
                merged[name] = _parse_bool(name, merged[name])
        return cls(parts.netloc, parts.path, **merged)

    def __repr__(self) -> str:
        return f"S3ObjectStore('s3://{self.bucket}/{self.prefix}', endpoint={self.endpoint!r})"

    def _live(self) -> Any:
        if self._client is None:
            raise ObjectStoreError(f"{self!r} is closed")
        return self._client

    def _failure(self, op: str, key: str, exc: BaseException) -> ObjectStoreError:
        err = ObjectStoreError(f"S3 {op} of {key!r} failed: {_short(exc)}")
        err.__cause__ = exc
        return err

    # -- conditional put ----------------------------------------------------------

    async def verify_conditional_put(self) -> bool:
        """Whether the endpoint refuses a second create of one key (probes a scratch key)."""
        client = self._live()
        probe = f".nereus-probe/conditional-put-{uuid.uuid4().hex}"
        try:
            await obstore_call(client.put_async, probe, b"1", mode="create", use_multipart=False)
            try:
                await obstore_call(client.put_async, probe, b"2", mode="create", use_multipart=False)
            except (AlreadyExistsError, NotSupportedError) as exc:
                return isinstance(exc, AlreadyExistsError)
            return False
        except FileNotFoundError:  # a PUT answered 404: no such bucket
            raise ObjectStoreError(f"bucket {self.bucket!r} not found at {self.endpoint or 'AWS'}") from None
        except BaseError as exc:
            raise self._failure("conditional-put probe", probe, exc) from exc
        finally:
            # Bounded: after a timeout cancelled the puts, an unreachable endpoint must not hold the
            # caller here for the client's whole retry schedule. A leftover probe object is harmless.
            with contextlib.suppress(Exception):  # obstore raises FileNotFoundError and its own errors
                await wait_for(obstore_call(client.delete_async, probe), _PROBE_CLEANUP_SECONDS)

    async def _require_conditional_put(self) -> None:
        if self._conditional_put_ok is None:
            # Concurrent first puts may each probe; the answer is the same, so no lock.
            self._conditional_put_ok = await self.verify_conditional_put()
        if not self._conditional_put_ok:
            raise ObjectStoreError(
                f"{self!r}: the endpoint ignores If-None-Match on PUT (a second create overwrote "
                "the object), so put_if_absent cannot be made safe; refusing to write"
            )

    # -- operations ---------------------------------------------------------------

    async def put_if_absent(self, key: str, data: Payload) -> None:
        validate_key(key)
        chunks = as_chunks(data)
        body: Any = chunks[0] if len(chunks) == 1 else (chunks or b"")
        await self._require_conditional_put()
        client = self._live()
        for attempt in range(_CONFLICT_RETRIES + 1):
            try:
                # Single PUT: obstore only honours mode="create" outside multipart uploads,
                # so several chunks are joined into one body inside obstore.
                await obstore_call(client.put_async, key, body, mode="create", use_multipart=False)
                return
            except AlreadyExistsError:
                raise ObjectExists(key) from None
            except BaseError as exc:
                if "ConditionalRequestConflict" in str(exc) and attempt < _CONFLICT_RETRIES:
                    await asyncio.sleep(_CONFLICT_BACKOFF * 2**attempt)
                    continue
                raise self._failure("put", key, exc) from exc

    async def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        validate_key(key)
        check_range(start, end)
        client = self._live()
        if end == start:
            # obstore rejects empty ranges before sending; still report a missing key.
            await self.head(key)
            return b""
        try:
            if end is not None:
                data = await obstore_call(client.get_range_async, key, start=start, end=end)
            else:
                options = {"range": {"offset": start}} if start else None
                data = await obstore_call((await obstore_call(client.get_async, key, options=options)).bytes_async)
        except FileNotFoundError:
            raise ObjectNotFound(key) from None
        except BaseError as exc:
            # S3 answers 416 for a range starting at or past the end; the contract clips
            # that to b"". Look at the size instead of parsing the error text.
            if start >= (await self.head(key)).size:
                return b""
            raise self._failure("get", key, exc) from exc
        return bytes(data)

    async def head(self, key: str) -> ObjectInfo:
        validate_key(key)
        try:
            meta = await obstore_call(self._live().head_async, key)
        except FileNotFoundError:
            raise ObjectNotFound(key) from None
        except BaseError as exc:
            raise self._failure("head", key, exc) from exc
        return ObjectInfo(key, meta["size"])

    async def delete(self, key: str) -> bool:
        """S3 deletes of missing keys succeed, so existence comes from a HEAD first.

        Racy by nature: with concurrent deletes of one key both may return True.
        """
        try:
            await self.head(key)
        except ObjectNotFound:
            return False
        try:
            await obstore_call(self._live().delete_async, key)
        except BaseError as exc:
            raise self._failure("delete", key, exc) from exc
        return True

    async def close(self) -> None:
        # obstore has no close(): dropping the store releases its connection pool.
        self._client = None
