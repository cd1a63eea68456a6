"""Oxia key order encoding and hash-range routing."""

from __future__ import annotations

import functools

from hypothesis import given, settings
from hypothesis import strategies as st

from nereus.meta.keys import (compare_keys, decode_key, encode_key, hash_ranges, key_hash,
                              shard_index)

# Keys built from few characters, so '/' and shared prefixes are frequent.
keys = st.text(alphabet=st.sampled_from("/ab\x01é~"), max_size=12)


@settings(max_examples=3000, deadline=None)
@given(keys, keys)
def test_encoding_preserves_oxia_order(a, b):
    ea, eb = encode_key(a), encode_key(b)
    assert ((ea > eb) - (ea < eb)) == compare_keys(a, b)
    assert decode_key(ea) == a


def test_known_order():
    ks = ["/a/b/c", "/a/z", "/a", "/b", "a", "/a/b", "/", "", "/a/", "/a//"]
    got = sorted(ks, key=functools.cmp_to_key(compare_keys))
    assert got == ["", "a", "/", "/a", "/b", "/a/", "/a/b", "/a/z", "/a//", "/a/b/c"]
    assert sorted(ks, key=encode_key) == got


def test_hash_ranges_cover_uint32():
    for n in (1, 2, 3, 4, 5, 7, 16):
        r = hash_ranges(n)
        assert r[0][0] == 0 and r[-1][1] == 0xFFFFFFFF
        assert all(r[i][1] + 1 == r[i + 1][0] for i in range(n - 1))
        for k in ("a", "/topics/t", "x" * 50):
            lo, hi = r[shard_index(k, n)]
            assert lo <= key_hash(k) <= hi


def test_hash_is_xxh3_low_32_bits():
    import xxhash

    assert key_hash("a") == xxhash.xxh3_64_intdigest(b"a") & 0xFFFFFFFF
    assert key_hash("") == xxhash.xxh3_64_intdigest(b"") & 0xFFFFFFFF
