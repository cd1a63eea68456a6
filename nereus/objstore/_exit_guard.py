"""Keep obstore's runtime threads off a finalizing interpreter, where they abort the process.

obstore answers each ``*_async`` call from a tokio thread: with the GIL it hands the result
to the caller's event loop through ``loop.call_soon_threadsafe``, whose wake-up write (the
asyncio selector loop's self-pipe) lets the GIL go and takes it back. Once the interpreter
has begun finalizing, CPython ends (``pthread_exit``) a thread that takes the GIL; the
forced unwind through the tokio thread's Rust frames aborts the whole process (SIGABRT,
exit 134) instead of letting it exit with its own code. A request that failed just before
exit makes that race likely: its answer is delivered while ``asyncio.run`` returns.

So every obstore call goes through ``call``: the loop's ``call_soon_threadsafe`` is wrapped
to know when a thread is inside it (uvloop's never lets the GIL go there and cannot be
wrapped), the calls still running are remembered, and an ``atexit`` handler, which runs
before finalization begins, waits (letting the GIL go) until no obstore answer is on its way.
"""

from __future__ import annotations

import asyncio
import atexit
import time
import weakref

#: How long exit waits for requests still running (an unreachable endpoint's retries may take
#: minutes; past this the process exits anyway, as it did before).
EXIT_WAIT_SECONDS = 5.0
#: What a cancelled call's thread may still need: it takes the GIL once to see the cancellation.
_CANCELLED_GRACE_SECONDS = 0.05

_inside: dict[object, None] = {}  # one token per thread inside a wrapped call_soon_threadsafe
_running: set[asyncio.Future] = set()  # obstore calls not answered yet
_wrapped_loops: weakref.WeakSet = weakref.WeakSet()
_cancelled = False  # some obstore call was cancelled: its thread takes the GIL once more


def _counting(original):
    def call_soon_threadsafe(*args, **kwargs):
        token = object()
        _inside[token] = None  # dict operations are atomic under the GIL; a lock could block here
        try:
            return original(*args, **kwargs)
        finally:
            if len(args) > 1 and isinstance(args[1], asyncio.Future):
                # obstore's answer passes its future second: delivered, even to a closed loop.
                _running.discard(args[1])
            del _inside[token]

    return call_soon_threadsafe


def _wrap(loop: asyncio.AbstractEventLoop) -> None:
    if loop in _wrapped_loops:
        return
    try:
        loop.call_soon_threadsafe = _counting(loop.call_soon_threadsafe)
    except AttributeError:  # uvloop: a compiled loop, whose call_soon_threadsafe keeps the GIL
        pass
    _wrapped_loops.add(loop)


def _settled(future: asyncio.Future) -> None:
    global _cancelled
    _running.discard(future)
    if future.cancelled():
        _cancelled = True


def call(function, *args, **kwargs) -> asyncio.Future:
    """``function(*args, **kwargs)``, an obstore ``*_async`` call, remembered until it is answered."""
    _wrap(asyncio.get_running_loop())  # before the call: its answer may come at once
    future = asyncio.ensure_future(function(*args, **kwargs))
    _running.add(future)
    future.add_done_callback(_settled)
    return future


def quiesce(deadline: float = EXIT_WAIT_SECONDS) -> bool:
    """Wait, letting the GIL go, until no obstore answer is on its way; False if ``deadline`` passed."""
    end = time.monotonic() + deadline
    while _inside or any(not f.done() for f in list(_running)):
        if time.monotonic() >= end:
            return False
        time.sleep(0.001)
    if _cancelled:
        time.sleep(_CANCELLED_GRACE_SECONDS)
    return True


atexit.register(quiesce)

__all__ = ["EXIT_WAIT_SECONDS", "call", "quiesce"]
