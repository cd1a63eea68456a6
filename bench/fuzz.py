"""Long fuzz runs of the parsers and request handlers: ``python bench/fuzz.py --inputs 1000000``.

Targets (the suite's, tests/fuzz): the Pulsar frame decoder, the Kafka request decoder,
the WAL and compacted object parsers (in process), the admin REST API of a real
standalone and the Oxia-protocol gRPC service of a real ``nereus oxia``. Each input is
checked by the suite's oracle: only the documented error may escape (4xx/clean gRPC
status for the servers); anything else is a failure, saved as JSON under
``--failures`` with the seed that rebuilds it (``--replay FILE`` runs one again).

Engines: ``mutate`` (default; seeded ``random``, a corpus of well-formed inputs built
with the project's encoders, bit flips, byte inserts/deletes, truncation, lying length
fields, splicing, pure random bytes; thousands of inputs/s) and ``hypothesis`` (the
suite's strategies; a few hundred inputs/s). Exits 1 if any target failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fuzz_codec  # noqa: E402
import fuzz_remote  # noqa: E402
from tests.fuzz import remote_targets  # noqa: E402
from tests.fuzz.targets import CODEC_TARGETS  # noqa: E402

KEPT_FAILURES = 20  # saved and printed per target; all are counted
PROGRESS_EVERY = 30.0  # seconds


@dataclass(frozen=True)
class BenchTarget:
    name: str
    strategy: st.SearchStrategy  # the hypothesis engine's inputs
    session: Callable[[], Any]  # context manager yielding check(input)
    corpus: Callable[[random.Random], list]
    generate: Callable[[random.Random, list], Any]  # the mutation engine's input from its rng
    # Requests in flight at once (server targets: their handlers wait on disk writes, not CPU).
    workers: int = 1


def _in_process(check):
    return lambda: contextlib.nullcontext(check)


_codec = {t.name: t for t in CODEC_TARGETS}
TARGETS = [
    BenchTarget("pulsar-frames", _codec["pulsar-frames"].inputs, _in_process(_codec["pulsar-frames"].check),
                lambda rng: fuzz_codec.pulsar_corpus(), fuzz_codec.pulsar_input),
    BenchTarget("kafka-requests", _codec["kafka-requests"].inputs, _in_process(_codec["kafka-requests"].check),
                lambda rng: fuzz_codec.kafka_corpus(), fuzz_codec.kafka_input),
    BenchTarget("wal-objects", _codec["wal-objects"].inputs, _in_process(_codec["wal-objects"].check),
                fuzz_codec.wal_corpus, fuzz_codec.wal_input),
    BenchTarget("compacted-objects", _codec["compacted-objects"].inputs,
                _in_process(_codec["compacted-objects"].check), fuzz_codec.compacted_corpus,
                fuzz_codec.compacted_input),
    BenchTarget("admin-rest", remote_targets.admin_requests(), fuzz_remote.admin_session,
                lambda rng: [], fuzz_remote.admin_input, workers=8),
    BenchTarget("oxia-grpc", remote_targets.oxia_requests(), fuzz_remote.oxia_session,
                fuzz_remote.oxia_corpus, fuzz_remote.oxia_input, workers=8),
]


def _encode(value):
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"hex": bytes(value).hex()}
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    return value


def _decode(value, top: bool = True):
    if isinstance(value, dict) and "hex" in value:
        return bytes.fromhex(value["hex"])
    if isinstance(value, list):
        items = [_decode(v, False) for v in value]
        return tuple(items) if top else items
    return value


class Findings:
    """Failures of one target: all counted, the first few saved and printed."""

    def __init__(self, target: str, engine: str, run_seed: int, directory: Path) -> None:
        self.target, self.engine, self.run_seed, self.directory = target, engine, run_seed, directory
        self.count = 0
        self.kinds: dict[str, int] = {}

    def add(self, index: int, input_seed: int | None, data, exc: BaseException) -> None:
        self.count += 1
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        kind = f"{type(exc).__name__} at {Path(frame.filename).name}:{frame.lineno}"
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if self.count > KEPT_FAILURES:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{self.target}-{self.engine}-{self.run_seed}-{index}.json"
        path.write_text(json.dumps({
            "target": self.target, "engine": self.engine, "run_seed": self.run_seed, "index": index,
            "input_seed": input_seed, "input": _encode(data),
            "error": "".join(traceback.format_exception(exc)),
        }, indent=1))
        print(f"   failure #{self.count} ({kind}): {type(exc).__name__}: {str(exc)[:200]} -> {path}", flush=True)


class Progress:
    def __init__(self, name: str) -> None:
        self.name, self.start, self.last = name, time.monotonic(), time.monotonic()

    def tick(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY:
            self.last = now
            print(f"   {self.name}: {done:,} inputs, {done / (now - self.start):,.0f}/s", flush=True)


def _inputs(target: BenchTarget, inputs: int, seed: int):
    """(index, input seed, input) for the run ``seed``: input i depends on the seeds alone."""
    master = random.Random(seed)
    corpus = target.corpus(random.Random(seed))
    rng = random.Random()
    for index in range(inputs):
        input_seed = master.getrandbits(64)
        rng.seed(input_seed)
        yield index, input_seed, target.generate(rng, corpus)


def run_mutate(target: BenchTarget, check, inputs: int, seed: int, findings: Findings) -> int:
    progress = Progress(target.name)
    if target.workers == 1:
        for index, input_seed, data in _inputs(target, inputs, seed):
            try:
                check(data)
            except Exception as exc:  # noqa: BLE001 - every escape is a finding, keep going
                findings.add(index, input_seed, data, exc)
            if index & 1023 == 0:
                progress.tick(index)
        return inputs
    with ThreadPoolExecutor(target.workers) as pool:
        pending: dict = {}
        for index, input_seed, data in _inputs(target, inputs, seed):
            pending[pool.submit(check, data)] = (index, input_seed, data)
            if len(pending) >= 4 * target.workers:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    if future.exception() is not None:
                        findings.add(*pending[future], future.exception())
                    del pending[future]
            if index & 1023 == 0:
                progress.tick(index)
        for future, (index, input_seed, data) in pending.items():
            if future.exception() is not None:
                findings.add(index, input_seed, data, future.exception())
    return inputs


def run_hypothesis(target: BenchTarget, check, inputs: int, seed: int, findings: Findings) -> int:
    done = 0
    progress = Progress(target.name)

    @settings(max_examples=inputs, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(target.strategy)
    def one(data):
        nonlocal done
        done += 1
        try:
            check(data)
        except Exception as exc:  # noqa: BLE001 - every escape is a finding, keep going
            findings.add(done, None, data, exc)
        progress.tick(done)

    random.seed(seed)
    one()
    return done


def replay(path: Path) -> int:
    """Run one saved failure again (a server target starts its server for it)."""
    saved = json.loads(path.read_text())
    target = next(t for t in TARGETS if t.name == saved["target"])
    data = _decode(saved["input"])
    if saved["input_seed"] is not None:  # the mutation engine rebuilds it from its seed alone
        corpus = target.corpus(random.Random(saved["run_seed"]))
        data = target.generate(random.Random(saved["input_seed"]), corpus)
    with target.session() as check:
        check(data)
    print("passed")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=1_000_000, help="inputs per target")
    parser.add_argument("--target", action="append", choices=[t.name for t in TARGETS],
                        help="only these targets (repeatable)")
    parser.add_argument("--engine", choices=["mutate", "hypothesis"], default="mutate")
    parser.add_argument("--seed", type=int, default=1, help="run seed (the mutation engine is deterministic in it)")
    parser.add_argument("--failures", type=Path, default=Path("fuzz-failures"), help="where failing inputs go")
    parser.add_argument("--replay", type=Path, help="run one saved failure again and exit")
    args = parser.parse_args()
    if args.replay:
        return replay(args.replay)
    run = run_mutate if args.engine == "mutate" else run_hypothesis
    failed = False
    for target in TARGETS:
        if args.target and target.name not in args.target:
            continue
        findings = Findings(target.name, args.engine, args.seed, args.failures)
        with target.session() as check:
            start = time.monotonic()
            done = run(target, check, args.inputs, args.seed, findings)
            elapsed = time.monotonic() - start
        print(f"{target.name} [{args.engine}]: {done:,} inputs in {elapsed:.0f} s ({done / elapsed:,.0f}/s), "
              f"{findings.count} failures", flush=True)
        for kind, count in sorted(findings.kinds.items(), key=lambda kv: -kv[1]):
            print(f"   {count} x {kind}")
        failed |= bool(findings.count)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
