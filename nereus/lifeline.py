"""A child process that dies with its parent, however the parent dies.

A parent that is killed with SIGKILL runs no clean-up, so its children (the compaction
worker and its Spark JVM, the child brokers of a multi-broker standalone) must notice
on their own. The parent starts each child with a pipe as its standard input and
never writes to it nor closes it; the kernel closes the write end when the parent
exits for any reason. The child (``nereus --lifeline-stdin ...``) watches that pipe
from a thread and, on end-of-file, stops itself with SIGTERM: the same clean stop as
a Ctrl-C, so it releases what it holds (a Spark session, its broker's topics).

A Spark JVM needs nothing more: PySpark's gateway exits once its own standard input,
a pipe from the Python driver, closes.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

log = logging.getLogger(__name__)

#: A child still alive this long after SIGTERM (a stop that hangs) is killed.
KILL_AFTER_SECONDS = 60.0


def watch_parent(fd: int = 0, *, on_loss=None) -> threading.Thread:
    """Watch ``fd`` (a pipe the parent holds open) and stop this process when it reaches end-of-file."""
    thread = threading.Thread(target=_watch, args=(fd, on_loss), name="parent-lifeline", daemon=True)
    thread.start()
    return thread


def _watch(fd: int, on_loss) -> None:
    while True:
        try:
            data = os.read(fd, 4096)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            break
    log.warning("the parent process is gone (pid %d was its child): stopping", os.getpid())
    (on_loss or _stop_self)()


def _stop_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(KILL_AFTER_SECONDS)
    log.error("still running %.0f s after the parent died: exiting now", KILL_AFTER_SECONDS)
    os._exit(1)


__all__ = ["KILL_AFTER_SECONDS", "watch_parent"]
