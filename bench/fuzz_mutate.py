"""The fast engine of ``bench/fuzz.py``: byte mutations of well-formed inputs, driven by ``random``.

No hypothesis per input: one ``random.Random`` reseeded from a 64-bit seed per input
(so any input is rebuilt from its seed alone), a corpus of well-formed inputs built
once with the project's own encoders, and cheap edits of them.
"""

from __future__ import annotations

import random

# Values that make a length or count field lie: empty, one, sign boundaries, huge.
INTERESTING_32 = (0, 1, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF)
INTERESTING_64 = (0, 1 << 63, (1 << 63) - 1, (1 << 64) - 1)
# A 10-byte varint of all ones: the largest value a protobuf or Kafka varint can say.
HUGE_VARINT = b"\xff" * 9 + b"\x01"


def _flip_bit(rng: random.Random, data: bytearray, _corpus) -> None:
    if data:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)


def _set_byte(rng: random.Random, data: bytearray, _corpus) -> None:
    if data:
        data[rng.randrange(len(data))] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))


def _insert(rng: random.Random, data: bytearray, _corpus) -> None:
    pos = rng.randrange(len(data) + 1)
    data[pos:pos] = rng.randbytes(rng.randint(1, 16)) if rng.random() < 0.8 else HUGE_VARINT


def _delete(rng: random.Random, data: bytearray, _corpus) -> None:
    if data:
        pos = rng.randrange(len(data))
        del data[pos:pos + rng.randint(1, 16)]


def _truncate(rng: random.Random, data: bytearray, _corpus) -> None:
    if data:
        del data[rng.randrange(len(data)):]


def _length_field(rng: random.Random, data: bytearray, _corpus) -> None:
    """Overwrite a big-endian 2-, 4- or 8-byte field with a value that lies."""
    width = rng.choice((2, 4, 4, 8))
    if len(data) < width:
        return
    pos = rng.randrange(len(data) - width + 1)
    if width == 8:
        value = rng.choice(INTERESTING_64)
    else:
        value = rng.choice(INTERESTING_32 + (len(data), len(data) - pos, len(data) + 1)) & ((1 << 8 * width) - 1)
    data[pos:pos + width] = value.to_bytes(width, "big")


def _duplicate(rng: random.Random, data: bytearray, _corpus) -> None:
    if data:
        pos = rng.randrange(len(data))
        chunk = data[pos:pos + rng.randint(1, 32)]
        at = rng.randrange(len(data) + 1)
        data[at:at] = chunk


def _splice(rng: random.Random, data: bytearray, corpus) -> None:
    """This input's head with another corpus input's tail."""
    other = rng.choice(corpus)
    if not isinstance(other, (bytes, bytearray)) or not other:
        return
    cut = rng.randrange(len(data) + 1)
    data[cut:] = other[rng.randrange(len(other)):]


MUTATIONS = (_flip_bit, _set_byte, _insert, _delete, _truncate, _length_field, _length_field, _duplicate, _splice)


def mutate(rng: random.Random, seed: bytes, corpus, *, max_edits: int = 4) -> bytes:
    """``seed`` with 1..``max_edits`` random edits (``corpus``: other inputs to splice from)."""
    data = bytearray(seed)
    for _ in range(rng.randint(1, max_edits)):
        rng.choice(MUTATIONS)(rng, data, corpus)
    return bytes(data)


def hostile_bytes(rng: random.Random, corpus) -> bytes:
    """One input: mostly a mutated corpus input, sometimes pure random bytes or an intact one."""
    roll = rng.random()
    if roll < 0.1:
        return rng.randbytes(rng.randint(0, 256))
    if roll < 0.12:
        return rng.choice(corpus)
    return mutate(rng, rng.choice(corpus), corpus)
