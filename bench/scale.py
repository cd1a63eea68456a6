"""The Scale issue's benchmarks, one part at a time or several in a row.

    .venv/bin/python bench/scale.py --only records --topics 1000000
    .venv/bin/python bench/scale.py --only records            # 10,000,000 topic records
    .venv/bin/python bench/scale.py --only loaded --loaded-topics 20000
    .venv/bin/python bench/scale.py --only simulate           # about two minutes
    .venv/bin/python bench/scale.py --only cluster --cluster-topics 1000000

Parts (``--only`` takes a comma list; default: every part):

* ``records`` (``_scale_records.py``): topic records through the broker's own admin code
  in one embedded metadata engine: creation rate, RSS, disk, lookup latency, namespace
  listing by pages, restart.
* ``loaded`` (``_scale_loaded.py``): a broker's memory per loaded idle topic, and after
  they are unloaded for idleness.
* ``kafka-metadata`` (``_scale_kafka_metadata.py``): the time of a Kafka Metadata answer (v12) for
  every topic, 100,000 partitions by default.
* ``cluster`` (``_scale_cluster.py``): topics written and read back through a cluster of
  brokers, their memory, and a broker killed: when the survivors serve its topics again.
* ``simulate`` (``_scale_simulate.py``, arithmetic in ``_scale_plan.py``): per-shard rates of the
  embedded engine (creations, lookups, claims, bytes per topic record), the shards and metadata
  servers 100M topic records need (``docs/scale.md``), and that plan scaled down on the engine's
  real shards, checked: spread, aggregate rate, bytes per record and per shard.

Each part is a module with ``add_arguments(parser)`` and ``async run(args) -> dict``; a new
part is one more entry of ``PARTS``. Each part prints progress lines as it goes and, at its
end, one line ``part=<name> key=value ...`` with its figures.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import _scale_cluster  # noqa: E402
import _scale_kafka_metadata  # noqa: E402
import _scale_loaded  # noqa: E402
import _scale_records  # noqa: E402
import _scale_simulate  # noqa: E402

#: name -> module of the part (``add_arguments``, ``run``), in the order they run.
PARTS = {
    "records": _scale_records,
    "loaded": _scale_loaded,
    "kafka-metadata": _scale_kafka_metadata,
    "cluster": _scale_cluster,
    "simulate": _scale_simulate,
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma list of the parts to run (of {', '.join(PARTS)})")
    parser.add_argument("--dir", default=None, help="parent of the temporary data directories (needs free space)")
    parser.add_argument("--no-uvloop", action="store_true")
    for name, part in PARTS.items():
        part.add_arguments(parser.add_argument_group(name))
    args = parser.parse_args(argv)
    args.parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = [p for p in args.parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; the parts are {', '.join(PARTS)}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.no_uvloop:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    for name in args.parts:
        figures = asyncio.run(PARTS[name].run(args))
        print(f"part={name} " + " ".join(f"{k}={v}" for k, v in figures.items()), flush=True)


if __name__ == "__main__":
    main()
