"""Rules shared by every backend: key syntax, payload shapes, range checks."""

from __future__ import annotations

from collections.abc import Sequence

from nereus.objstore.errors import InvalidObjectKey, InvalidRange

#: Local temp files start with this; keys may not, so a crashed write can never be
#: read back as an object.
TEMP_PREFIX = ".tmp-"

#: S3's key limit; also keeps local paths well inside PATH_MAX.
MAX_KEY_BYTES = 1024

Payload = bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview]


def validate_key(key: str) -> str:
    """Return ``key`` if it is a well-formed relative ``/``-separated key."""
    if not isinstance(key, str) or not key:
        raise InvalidObjectKey(f"object key must be a non-empty string, got {key!r}")
    if "\\" in key or "\x00" in key:
        raise InvalidObjectKey(f"object key {key!r} contains a backslash or NUL")
    if key.startswith("/"):
        raise InvalidObjectKey(f"object key {key!r} must be relative")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise InvalidObjectKey(f"object key is longer than {MAX_KEY_BYTES} bytes")
    for seg in key.split("/"):
        if seg in ("", ".", ".."):
            raise InvalidObjectKey(f"object key {key!r} has an empty, '.' or '..' segment")
        if seg.startswith(TEMP_PREFIX):
            raise InvalidObjectKey(f"object key {key!r} uses the reserved prefix {TEMP_PREFIX!r}")
    return key


def as_chunks(data: Payload) -> list[memoryview]:
    """View ``data`` as flat byte chunks without copying."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        parts = [data]
    elif isinstance(data, (list, tuple)):
        parts = data
    else:
        raise TypeError(f"object data must be bytes, memoryview or a list of them, not {type(data).__name__}")
    out = []
    for part in parts:
        view = memoryview(part)
        if not view.c_contiguous:
            raise TypeError("object data buffers must be C-contiguous")
        # cast("B") flattens typed or multi-dimensional views to plain bytes (a
        # flat byte view, the common case, needs no cast).
        out.append(view if view.ndim == 1 and view.format == "B" else view.cast("B"))
    return out


def check_range(start: int, end: int | None) -> None:
    """Reject negative or inverted ranges (clipping to the size is the backend's job)."""
    if start < 0 or (end is not None and end < start):
        raise InvalidRange(f"invalid byte range [{start}, {end})")


def clip_range(start: int, end: int | None, size: int) -> tuple[int, int]:
    """``[start, end)`` clipped to an object of ``size`` bytes (may be empty)."""
    # end >= start was checked, so the clipped stop never falls below the clipped start.
    return min(start, size), size if end is None else min(end, size)
