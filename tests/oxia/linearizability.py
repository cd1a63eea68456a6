"""A linearizability checker for single-key register histories (read, write, CAS).

Model: a register holding a value (None: absent). Every written value is unique,
so a compare-and-set names the value it expects (the client turns that into the
version id it read along with the value).

Operations are ``Op(call, ret, kind, arg, result)`` with times from one monotonic
clock; ``ret = inf`` marks an operation whose outcome is unknown (the connection
broke): it may have taken effect at any point after its call, or never.

The search is Wing & Gong's, with Lowe's memoisation of (linearized set, state):
repeatedly pick an operation that could take effect next (called before every
pending operation returned), apply it to the model if its result agrees, and
backtrack when stuck.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

INF = math.inf
READ, WRITE, CAS = "read", "write", "cas"


@dataclass(frozen=True)
class Op:
    call: float
    ret: float  # INF: outcome unknown
    kind: str  # read | write | cas
    arg: Any = None  # write: value; cas: (expected value, new value)
    result: Any = None  # read: value seen; cas: True/False (None when unknown)


def _apply(op: Op, state: Any) -> tuple[bool, Any]:
    if op.kind == READ:
        return op.result == state, state
    if op.kind == WRITE:
        return True, op.arg
    expected, new = op.arg
    if op.ret == INF:  # unknown outcome: if it took effect, it succeeded
        return state == expected, new
    if op.result:
        return state == expected, new
    return state != expected, state


def check(history: list[Op], initial: Any = None) -> bool:
    """True if ``history`` (of one register) is linearizable."""
    ops = sorted(history, key=lambda o: o.call)
    n = len(ops)
    must = 0
    for i, op in enumerate(ops):
        if op.ret != INF:
            must |= 1 << i
    seen: set[tuple[int, Any]] = set()
    stack: list[tuple[int, Any]] = [(0, initial)]
    while stack:
        mask, state = stack.pop()
        if mask & must == must:
            return True
        if (mask, state) in seen:
            continue
        seen.add((mask, state))
        pending = [i for i in range(n) if not mask >> i & 1]
        first_ret = min(ops[i].ret for i in pending)
        for i in pending:
            op = ops[i]
            if op.call > first_ret:
                break  # sorted by call: no later op can go first either
            ok, nxt = _apply(op, state)
            if ok:
                stack.append((mask | 1 << i, nxt))
    return False
