"""Long fuzz runs of the sans-io parsers: ``python bench/fuzz.py --inputs 1000000``.

Uses the suite's targets (tests/fuzz/targets.py): each input goes through the
parser as a broker or reader would, and only the parser's documented error may
escape. Prints inputs/s and failures per target; exits 1 if any target failed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fuzz.targets import CODEC_TARGETS  # noqa: E402


def run(target, inputs: int) -> tuple[int, list[str]]:
    done, failures = 0, []

    @settings(max_examples=inputs, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(target.inputs)
    def one(data):
        nonlocal done
        done += 1
        try:
            target.check(data)
        except Exception as exc:  # noqa: BLE001 - every escape is a finding, keep going
            if len(failures) < 20:
                failures.append(f"{type(exc).__name__}: {exc} <- {bytes(data[0] if isinstance(data, tuple) else data)[:80]!r}")

    one()
    return done, failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="inputs per target")
    parser.add_argument("--target", action="append", help="only these targets (repeatable)")
    args = parser.parse_args()
    failed = False
    for target in CODEC_TARGETS:
        if args.target and target.name not in args.target:
            continue
        start = time.monotonic()
        done, failures = run(target, args.inputs)
        elapsed = time.monotonic() - start
        print(f"{target.name}: {done} inputs in {elapsed:.0f} s ({done / elapsed:,.0f}/s), {len(failures)} failures",
              flush=True)
        for failure in failures:
            print("  ", failure)
        failed |= bool(failures)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
