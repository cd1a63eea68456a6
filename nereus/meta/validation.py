"""Argument checks shared by every MetadataStore backend, so all reject bad input alike."""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from .errors import InvalidRequest
from .keys import MAX_ENCODED_KEY, encode_key, index_key

#: Largest value a record may hold.
MAX_VALUE = 8 << 20


def check_key(key: object, what: str = "key") -> bytes:
    """Validate a key and return its order-preserving encoding.

    A key is stored in ``len(utf-8 bytes) + 1 + number of "/"`` bytes, at most
    ``MAX_ENCODED_KEY`` (500): a key without "/" may have 499 UTF-8 bytes.
    """
    if not isinstance(key, str):
        raise InvalidRequest(f"{what} must be a str, not {type(key).__name__}")
    if "\x00" in key:
        raise InvalidRequest(f"{what} must not contain NUL characters")
    ekey = encode_key(key)
    if len(ekey) > MAX_ENCODED_KEY:
        raise InvalidRequest(
            f"{what} too long: {len(ekey)} bytes stored (UTF-8 length + 1 + one per '/'), "
            f"the limit is {MAX_ENCODED_KEY}")
    return ekey


def check_index_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidRequest(f"a secondary index name must be a non-empty str, not {name!r}")
    if "\x00" in name:
        raise InvalidRequest("a secondary index name must not contain NUL characters")
    return name


def check_indexes(indexes: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> tuple[bytes, ...]:
    """Validate a put's secondary index entries; return their idx keys (duplicates dropped).

    Given as ``{index name: secondary key}`` or as (name, secondary key) pairs (an
    index may hold several entries of one record, as Oxia's requests allow).
    """
    if not indexes:
        return ()
    pairs = indexes.items() if isinstance(indexes, Mapping) else indexes
    out: dict[bytes, None] = {}
    for pair in pairs:
        try:
            name, secondary = pair
        except (TypeError, ValueError):
            raise InvalidRequest(f"a secondary index entry must be (name, secondary key), not {pair!r}") from None
        check_index_name(name)
        if not isinstance(secondary, str):
            raise InvalidRequest(f"secondary key of index {name!r} must be a str, not {type(secondary).__name__}")
        if "\x00" in secondary:
            raise InvalidRequest(f"secondary key of index {name!r} must not contain NUL characters")
        ik = index_key(name, secondary)
        if len(ik) > MAX_ENCODED_KEY:
            raise InvalidRequest(
                f"secondary index entry too long: index name + secondary key take {len(ik)} bytes stored, "
                f"the limit is {MAX_ENCODED_KEY}")
        out[ik] = None
    return tuple(out)


def check_value(value: object) -> bytes:
    if not isinstance(value, bytes):
        if not isinstance(value, (bytearray, memoryview)):
            raise InvalidRequest(f"value must be bytes, not {type(value).__name__}")
        value = bytes(value)
    if len(value) > MAX_VALUE:
        raise InvalidRequest(f"value too large ({len(value)} > {MAX_VALUE} bytes)")
    return value


def check_expected(v: object) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < -1:
        raise InvalidRequest(f"invalid expected_version_id {v!r}")
    return v


def check_deltas(deltas: Sequence[int] | None, partition_key: str | None,
                 expected: int | None) -> tuple[int, ...] | None:
    if deltas is None:
        return None
    out = tuple(deltas)
    if partition_key is None or expected is not None:
        raise InvalidRequest("sequence keys need a partition key and no expected version")
    if not out or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in out):
        raise InvalidRequest("sequence_key_deltas must be non-negative ints")
    if out[0] == 0:
        raise InvalidRequest("the first sequence key delta must be > 0")
    return out


def check_page_size(page_size: object) -> int:
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise InvalidRequest("page_size must be a positive int")
    return page_size

