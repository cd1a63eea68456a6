"""Where a produced byte's broker CPU goes: user and kernel time per MiB written, per message.

One ``nereus standalone`` (``file://`` objects); confluent-kafka produces 1 KiB records with
``kafka_e2e.py``'s throughput settings (acks=all, linger 5 ms, 256 KiB batches), after a
warm-up of a quarter as many. For each partition count and round it prints the rate, the
broker's CPU per message, and its user and kernel CPU per MiB the broker wrote (``/proc``:
``stat`` and ``io``'s ``wchar``), with its minor page faults per MiB. Kernel time per MiB
is the figure the object store's write path decides (the copy into the page cache, or not).

Usage: .venv/bin/python bench/produce_write_cost.py [--messages 300000] [--partitions 1,8] [--rounds 2]
The last line is ``key=value`` pairs (medians over the rounds).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import uuid
from pathlib import Path

from _procs import start_nereus
from kafka_e2e import create_topic, produce_throughput


def _stat(pid: int) -> tuple[int, int, int]:
    """(minor faults, user ticks, system ticks) of process ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[7]), int(fields[11]), int(fields[12])


def _written(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise RuntimeError("no wchar in /proc/PID/io")


def measure(pid: int, bootstrap: str, partitions: int, n: int) -> dict[str, float]:
    import os

    tick = os.sysconf("SC_CLK_TCK")
    topic = f"write-cost-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions)
    produce_throughput(bootstrap, topic, partitions, n // 4)
    faults0, user0, sys0 = _stat(pid)
    wrote0 = _written(pid)
    rate = produce_throughput(bootstrap, topic, partitions, n)
    faults1, user1, sys1 = _stat(pid)
    mib = (_written(pid) - wrote0) / 2**20
    user_s, sys_s = (user1 - user0) / tick, (sys1 - sys0) / tick
    return {"rate": rate, "us_per_msg": (user_s + sys_s) * 1e6 / n, "user_ms_per_mib": user_s * 1e3 / mib,
            "sys_ms_per_mib": sys_s * 1e3 / mib, "faults_per_mib": (faults1 - faults0) / mib}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--partitions", default="1,8")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    counts = [int(p) for p in args.partitions.split(",")]
    results: dict[int, list[dict[str, float]]] = {p: [] for p in counts}
    with tempfile.TemporaryDirectory() as tmp:
        proc, ports = start_nereus(Path(tmp))
        try:
            bootstrap = f"127.0.0.1:{ports['kafka']}"
            for round_ in range(args.rounds):
                for partitions in counts:
                    figures = measure(proc.pid, bootstrap, partitions, args.messages)
                    results[partitions].append(figures)
                    print(f"round {round_ + 1}, {partitions} partition(s): " + ", ".join(
                        f"{k}={v:,.2f}" for k, v in figures.items()), flush=True)
        finally:
            proc.kill()
            proc.wait()
    summary = {f"p{p}_{k}": statistics.median(r[k] for r in rs) for p, rs in results.items() for k in rs[0]}
    print(" ".join(f"{k}={v:.2f}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
