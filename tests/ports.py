"""Free ports for servers that tests start as processes."""

from __future__ import annotations

import os
import random
import socket

# Below Linux's default ephemeral range (32768-60999): outgoing connections never take
# these, so a port found free stays free until the server under test binds it.
_BELOW_EPHEMERAL = (20000, 32000)


def _worker_range() -> tuple[int, int]:
    """This process's share of the range: parallel test workers never hand out the same port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    low, high = _BELOW_EPHEMERAL
    share = (high - low) // max(count, 1)
    return low + index * share, low + (index + 1) * share - 64


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


# Ports handed out by this process: a test often picks several before any server binds
# one, so a port found free must not be handed out twice.
_handed_out: set[int] = set()


def port_run(count: int = 2) -> int:
    """A port p with p .. p+count-1 all free (``nereus standalone --brokers N`` listens on the ports + i)."""
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(*_worker_range())
        run = range(port, port + count)
        if not _handed_out.intersection(run) and all(_free(p) for p in run):
            _handed_out.update(run)
            return port
    raise AssertionError(f"no run of {count} free ports")


def free_port() -> int:
    """A free port that no connection of this machine will take before a server binds it."""
    return port_run(1)
