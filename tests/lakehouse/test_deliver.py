"""``nereus lakehouse deliver`` against a real standalone: records from pulsar-client and a
Kafka client delivered into Delta (deltalake), Hudi (read back by hudi-rs) and Iceberg
(pyiceberg, SQL catalog on SQLite) tables; incremental runs, kill -9 of the job at exact
and random points, and retention (a trimmed topic) reflected as table deletes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pulsar = pytest.importorskip("pulsar")
confluent_kafka = pytest.importorskip("confluent_kafka")
deltalake = pytest.importorskip("deltalake")
pytest.importorskip("pyiceberg")
pytest.importorskip("sqlalchemy")
hudi = pytest.importorskip("hudi")

from click.testing import CliRunner  # noqa: E402
from pyiceberg.catalog import load_catalog  # noqa: E402

from nereus.lakehouse import rows as _rows  # noqa: E402
from nereus.lakehouse.cli import lakehouse  # noqa: E402
from nereus.lakehouse.iceberg_target import SUMMARY_KEY  # noqa: E402
from nereus.meta import connect  # noqa: E402
from nereus.objstore import open_object_store  # noqa: E402
from tests.standalone_process import Standalone  # noqa: E402
from tests.standalone_process import admin as _admin  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MIXED = "persistent://public/default/sdt-mixed"
PARTITIONS = 3
#: Bounds a hang only: every wait ends as soon as its condition holds (a loaded 2-core
#: machine needs seconds to start a job process).
DEADLINE = 180.0




def _urls(node: Standalone) -> list[str]:
    return ["--metadata", f"oxia://127.0.0.1:{node.ports['oxia']}",
            "--objects", (node.data_dir / "objects").resolve().as_uri()]


class Producers:
    """Writes waves of records with both protocols; ``expected``: (partition, offset) -> fields."""

    def __init__(self, node: Standalone, topic: str) -> None:
        self.node = node
        self.topic = topic
        self.expected: dict[tuple[int, int], tuple] = {}
        self.waves = 0

    def wave(self, pulsar_count: int = 45, kafka_count: int = 30) -> int:
        """One wave; returns how many records it added."""
        self.waves += 1
        before = len(self.expected)
        self._pulsar(pulsar_count, f"w{self.waves}")
        self._kafka(kafka_count, f"w{self.waves}")
        return len(self.expected) - before

    def _pulsar(self, count: int, tag: str) -> None:
        client = pulsar.Client(self.node.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
        lock, errors = threading.Lock(), []
        try:
            batched = client.create_producer(self.topic, producer_name=f"batched-{tag}", batching_enabled=True,
                                             batching_max_messages=10, batching_max_publish_delay_ms=20)
            plain = client.create_producer(self.topic, producer_name=f"plain-{tag}", batching_enabled=False)

            def sent(res, mid, fields):
                if res != pulsar.Result.Ok:
                    errors.append(res)
                    return
                with lock:
                    self.expected[(mid.partition(), mid.entry_id() + max(mid.batch_index(), 0))] = fields

            for i in range(count):
                key, value, props = f"p{i % 7}", f"pulsar-{tag}-{i}".encode(), {"i": str(i), "tag": tag}
                event = 1_700_000_000_000 + i if i % 2 == 0 else None
                producer = plain if i % 5 == 0 else batched
                fields = (key.encode(), value, props, producer.producer_name(), event)
                extra = {"event_timestamp": event} if event else {}
                producer.send_async(value, lambda r, m, f=fields: sent(r, m, f), properties=props,
                                    partition_key=key, **extra)
            batched.flush()
            plain.flush()
            batched.close()
            plain.close()
        finally:
            client.close()
        assert not errors

    def _kafka(self, count: int, tag: str) -> None:
        producer = confluent_kafka.Producer({"bootstrap.servers": self.node.bootstrap, "linger.ms": 10,
                                             "enable.idempotence": True})
        errors = []

        def delivered(err, msg, props):
            if err is not None:
                errors.append(err)
            else:
                self.expected[(msg.partition(), msg.offset())] = (msg.key(), msg.value(), props, "kafka",
                                                                   msg.timestamp()[1])

        for i in range(count):
            key = None if i % 6 == 0 else f"k{i % 5}".encode()
            props = {"i": str(i), "src": "kafka"}
            producer.produce(self.topic.rsplit("/", 1)[1], value=f"kafka-{tag}-{i}".encode(), key=key,
                             headers=[(k, v.encode()) for k, v in props.items()],
                             on_delivery=lambda e, m, p=props: delivered(e, m, p))
        assert producer.flush(DEADLINE) == 0
        assert not errors


@pytest.fixture(scope="module")
def mixed(standalone) -> Producers:
    _admin(standalone, "PUT", "/persistent/public/default/sdt-mixed/partitions", PARTITIONS)
    producers = Producers(standalone, MIXED)
    producers.wave()
    return producers


def committed(node: Standalone, topic: str) -> dict[tuple[int, int], tuple]:
    """Every committed row of ``topic`` read with ``nereus.lakehouse.rows`` (the ground truth)."""

    async def read():
        meta = connect(f"oxia://127.0.0.1:{node.ports['oxia']}")
        objects = open_object_store((node.data_dir / "objects").resolve().as_uri())
        out = {}
        try:
            for name, partition, stream in await _rows.partitions(meta, topic):
                bounds = await _rows.stream_range(meta, name, partition, stream)
                if bounds is not None:
                    async for batch in _rows.read_rows(meta, objects, bounds):
                        out.update({(r[1], r[2]): r for r in batch})
        finally:
            await objects.close()
            await meta.close()
        return out

    return asyncio.run(read())


def _as_rows(table) -> dict[tuple[int, int], tuple]:
    """Table rows keyed by (partition, offset); fails on a duplicate."""
    out = {}
    for row in table.to_pylist():
        key = (row["partition"], row["offset"])
        assert key not in out, f"{key} delivered twice"
        props = row["properties"]
        out[key] = (row["topic"], row["partition"], row["offset"], row["publish_time"], row["event_time"],
                    row["key"], row["value"], None if props is None else dict(props), row["producer_name"])
    return out


def delta_rows(path: Path) -> dict[tuple[int, int], tuple]:
    return _as_rows(deltalake.DeltaTable(str(path)).to_pyarrow_table())


def hudi_rows(path: Path) -> dict[tuple[int, int], tuple]:
    """The table's snapshot as hudi-rs reads it."""
    import pyarrow as pa

    batches = hudi.HudiTableBuilder.from_base_uri(str(path)).build().read()
    return _as_rows(pa.Table.from_batches(batches)) if batches else {}


def iceberg_properties(tmp: Path) -> dict[str, str]:
    return {"type": "sql", "uri": f"sqlite:///{tmp / 'catalog.db'}", "warehouse": (tmp / "warehouse").as_uri()}


def iceberg_rows(tmp: Path, table: str) -> dict[tuple[int, int], tuple]:
    return _as_rows(load_catalog("lake", **iceberg_properties(tmp)).load_table(table).scan().to_arrow())


def _iceberg_args(tmp: Path, table: str) -> list[str]:
    args = ["--iceberg-catalog", "lake", "--table", table]
    for key, value in iceberg_properties(tmp).items():
        args += ["--catalog-property", f"{key}={value}"]
    return args


def target_args(kind: str, tmp: Path, table: str) -> list[str]:
    if kind == "iceberg":
        return _iceberg_args(tmp, f"streams.{table}")
    return [f"--{kind}", str(tmp / table)]


def target_rows(kind: str, tmp: Path, table: str) -> dict[tuple[int, int], tuple]:
    if kind == "iceberg":
        return iceberg_rows(tmp, f"streams.{table}")
    return delta_rows(tmp / table) if kind == "delta" else hudi_rows(tmp / table)


def check_exactly_once(got: dict, truth: dict, producers: Producers | None = None) -> None:
    assert set(got) == set(truth), (f"missing {sorted(set(truth) - set(got))[:10]}, "
                                    f"extra {sorted(set(got) - set(truth))[:10]}")
    assert got == truth  # every column equals what the topic holds
    for key, (pkey, value, props, producer, event_ms) in (producers.expected.items() if producers else ()):
        row = got[key]
        assert (row[5], row[6], row[7], row[8]) == (pkey, value, props, producer)
        assert row[3] is not None
        assert (None if row[4] is None else int(row[4].timestamp() * 1000)) == event_ms


def deliver(node: Standalone, topic: str, target: list[str], *extra: str) -> str:
    """One ``deliver --once`` in this process; returns its summary line."""
    result = CliRunner().invoke(lakehouse, ["deliver", *_urls(node), "--topic", topic, *target, "--once",
                                            "--no-progress", *extra])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def delivered_count(output: str) -> int:
    return int(re.search(r"delivered (\d+) records", output).group(1))


def spawn(node: Standalone, topic: str, target: list[str], *extra: str, kill_at: str | None = None):
    env = dict(os.environ)
    env.pop("NEREUS_DELIVER_KILL_AT", None)
    if kill_at:
        env["NEREUS_DELIVER_KILL_AT"] = kill_at
    command = [sys.executable, "-m", "nereus.lakehouse.cli", "deliver", *_urls(node), "--topic", topic, *target,
               "--once", "--no-progress", *extra]
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def run_killed(node: Standalone, topic: str, target: list[str], kill_at: str, *extra: str) -> None:
    proc = spawn(node, topic, target, *extra, kill_at=kill_at)
    output = proc.communicate(timeout=DEADLINE)[0].decode()
    assert proc.returncode == -signal.SIGKILL, f"{kill_at}: exited {proc.returncode}\n{output}"


# -- tests -------------------------------------------------------------------------------------


def test_delta_delivery_and_incremental_runs(standalone, mixed, tmp_path):
    table = tmp_path / "delta"
    target = ["--delta", str(table)]
    out = deliver(standalone, MIXED, target, "--batch-records", "40")
    truth = committed(standalone, MIXED)
    assert delivered_count(out) == len(truth) == len(mixed.expected)
    assert {p for p, _ in truth} == set(range(PARTITIONS))
    check_exactly_once(delta_rows(table), truth, mixed)

    version = deltalake.DeltaTable(str(table)).version()
    assert delivered_count(deliver(standalone, MIXED, target)) == 0  # nothing new: no commit either
    assert deltalake.DeltaTable(str(table)).version() == version

    added = mixed.wave()
    assert delivered_count(deliver(standalone, MIXED, target)) == added
    dt = deltalake.DeltaTable(str(table))
    new_commits = [h for h in dt.history() if h["version"] > version]
    assert sum(int(h["operationMetrics"].get("num_added_rows", 0)) for h in new_commits) == added
    check_exactly_once(delta_rows(table), committed(standalone, MIXED), mixed)
    for p in range(PARTITIONS):  # the positions are the Delta txn versions
        assert dt.transaction_version(f"nereus:{MIXED}:{p}:end") == 1 + max(o for q, o in mixed.expected if q == p)


def test_iceberg_delivery_and_incremental_runs(standalone, mixed, tmp_path):
    target = _iceberg_args(tmp_path, "streams.mixed")
    out = deliver(standalone, MIXED, target, "--batch-records", "100")
    truth = committed(standalone, MIXED)
    assert delivered_count(out) == len(truth)
    check_exactly_once(iceberg_rows(tmp_path, "streams.mixed"), truth, mixed)

    added = mixed.wave()
    assert delivered_count(deliver(standalone, MIXED, target)) == added
    check_exactly_once(iceberg_rows(tmp_path, "streams.mixed"), committed(standalone, MIXED), mixed)
    table = load_catalog("lake", **iceberg_properties(tmp_path)).load_table("streams.mixed")
    offsets = json.loads(table.current_snapshot().summary[SUMMARY_KEY])[MIXED]
    assert {int(p): end for p, (_, end) in offsets.items()} == {
        p: 1 + max(o for q, o in mixed.expected if q == p) for p in range(PARTITIONS)}
    snapshots = len(table.snapshots())
    assert delivered_count(deliver(standalone, MIXED, target)) == 0
    assert len(load_catalog("lake", **iceberg_properties(tmp_path)).load_table("streams.mixed").snapshots()) \
        == snapshots


@pytest.mark.parametrize("kind", ["delta", "hudi", "iceberg"])
def test_kill_at_exact_points_then_rerun(standalone, mixed, tmp_path, kind):
    target = target_args(kind, tmp_path, "crash")
    batch = ["--batch-records", "25"]
    if len(committed(standalone, MIXED)) <= 3 * 25:
        mixed.wave()  # more than three batches, also when this test runs alone
    for point in ("after-commit:2", "before-commit:2"):
        run_killed(standalone, MIXED, target, point, *batch)
    got = target_rows(kind, tmp_path, "crash")
    truth = committed(standalone, MIXED)
    assert len(got) == 3 * 25 < len(truth)  # three commits of 25 landed (2 + 1), the rest did not
    assert all(got[k] == truth[k] for k in got)
    deliver(standalone, MIXED, target, *batch)  # the re-run resumes where the table says
    check_exactly_once(target_rows(kind, tmp_path, "crash"), truth, mixed)


def _count(pattern: Path) -> int:
    return len(list(pattern.parent.glob(pattern.name)))


@pytest.mark.parametrize("kind", ["delta", "hudi", "iceberg"])
def test_kill_at_random_points_then_rerun(standalone, mixed, tmp_path, kind):
    """SIGKILL while commits are being written (the kill lands wherever the job is)."""
    target = target_args(kind, tmp_path, "random")
    commits = {"delta": tmp_path / "random" / "_delta_log" / "*.json",
               "hudi": tmp_path / "random" / ".hoodie" / "timeline" / "*.commit",
               "iceberg": tmp_path / "warehouse" / "streams" / "random" / "metadata" / "*.metadata.json"}[kind]
    for seen in (3, 7):
        # Batches of 3: many more commits than the kill waits for, so a test process that a
        # loaded machine schedules late still finds the job running.
        proc = spawn(standalone, MIXED, target, "--batch-records", "3")
        deadline = time.monotonic() + DEADLINE
        while _count(commits) < seen and proc.poll() is None:
            assert time.monotonic() < deadline, "the job made no commits"
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=DEADLINE) == -signal.SIGKILL, "the job finished before it was killed"
    deliver(standalone, MIXED, target, "--batch-records", "50")
    check_exactly_once(target_rows(kind, tmp_path, "random"), committed(standalone, MIXED), mixed)


def _start(node: Standalone, topic: str) -> int:
    async def read():
        meta = connect(f"oxia://127.0.0.1:{node.ports['oxia']}")
        try:
            [(name, partition, stream)] = await _rows.partitions(meta, topic)
            return (await _rows.stream_range(meta, name, partition, stream)).start
        finally:
            await meta.close()

    return asyncio.run(read())


def test_retention_trim_becomes_table_deletes(standalone, tmp_path):
    """Trim through Pulsar's retention: a namespace policy of 0 minutes / 0 MB keeps nothing that
    is acknowledged, and a durable subscription that acknowledged offsets < 12 caps the trim
    there; ``POST .../trim`` (Pulsar's trimTopic) applies it at once."""
    topic = "persistent://public/sdt-retention/events"
    _admin(standalone, "PUT", "/namespaces/public/sdt-retention", {})
    client = pulsar.Client(standalone.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = client.subscribe(topic, "keep", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(30):
            producer.send(f"r-{i}".encode(), properties={"i": str(i)})
        delta = ["--delta", str(tmp_path / "delta")]
        iceberg = _iceberg_args(tmp_path, "streams.retention")
        hudi_table = ["--hudi", str(tmp_path / "hudi")]
        for target in (delta, iceberg, hudi_table):
            assert delivered_count(deliver(standalone, topic, target)) == 30

        messages = [consumer.receive(timeout_millis=int(DEADLINE * 1000)) for _ in range(12)]
        consumer.acknowledge_cumulative(messages[-1])  # offsets 0..11 acknowledged
        _admin(standalone, "POST", "/namespaces/public/sdt-retention/retention",
               {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
        deadline = time.monotonic() + DEADLINE
        while _start(standalone, topic) < 12:  # the acknowledgement reaches the cursor asynchronously
            assert time.monotonic() < deadline, "retention did not trim the acknowledged records"
            _admin(standalone, "POST", "/persistent/public/sdt-retention/events/trim")
            time.sleep(0.1)
        assert _start(standalone, topic) == 12
        for i in range(30, 35):
            producer.send(f"r-{i}".encode(), properties={"i": str(i)})
        producer.close()
        consumer.close()
    finally:
        client.close()

    truth = committed(standalone, topic)
    assert sorted(o for _, o in truth) == list(range(12, 35))
    run_killed(standalone, topic, delta, "after-delete:1")  # the delete landed, the append did not
    assert sorted(o for _, o in delta_rows(tmp_path / "delta")) == list(range(12, 30))
    assert delivered_count(deliver(standalone, topic, delta)) == 5
    assert delivered_count(deliver(standalone, topic, iceberg)) == 5
    run_killed(standalone, topic, hudi_table, "hudi-decided:1")  # the delete decided, not completed
    assert delivered_count(deliver(standalone, topic, hudi_table)) == 5
    check_exactly_once(delta_rows(tmp_path / "delta"), truth)
    check_exactly_once(iceberg_rows(tmp_path, "streams.retention"), truth)
    check_exactly_once(hudi_rows(tmp_path / "hudi"), truth)
    from nereus.lakehouse.hudi_table import HudiTable

    hudi_timeline = HudiTable(str(tmp_path / "hudi"))
    assert "delete" in [hudi_timeline.metadata(i)["operationType"] for i in hudi_timeline.completed()]

    dt = deltalake.DeltaTable(str(tmp_path / "delta"))
    assert "DELETE" in [h["operation"] for h in dt.history()]
    assert dt.transaction_version(f"nereus:{topic}:-1:start") == 12
    assert all(Path(uri.removeprefix("file://")).exists() for uri in dt.file_uris())  # no dangling references
    table = load_catalog("lake", **iceberg_properties(tmp_path)).load_table("streams.retention")
    assert {"overwrite", "delete"} & {s.summary.operation.value for s in table.snapshots()}
    assert all(Path(path.removeprefix("file://")).exists() for path in table.inspect.files()["file_path"].to_pylist())
    assert json.loads(table.current_snapshot().summary[SUMMARY_KEY])[topic]["-1"] == [12, 35]


def test_bad_input_is_a_readable_error(standalone, tmp_path):
    runner = CliRunner()
    base = ["deliver", *_urls(standalone), "--topic", MIXED, "--once"]
    cases = [
        ([], "give exactly one target"),
        (["--delta", str(tmp_path / "d"), "--iceberg-catalog", "x", "--table", "a.b"], "give exactly one target"),
        (["--iceberg-catalog", "x"], "needs --table"),
        (["--iceberg-catalog", "x", "--table", "a.b", "--catalog-property", "novalue"], "is not key=value"),
        (["--iceberg-catalog", "x", "--table", "nonamespace", "--catalog-property", "type=sql"], "namespace.table"),
        (["--delta", str(tmp_path / "d"), "--interval", "5"], "exclude each other"),
        (["--delta", str(tmp_path / "d"), "--batch-records", "0"], "--batch-records"),
    ]
    for extra, message in cases:
        result = runner.invoke(lakehouse, base + extra)
        assert result.exit_code == 2 or (result.exit_code == 1 and "Error" in result.output), (extra, result.output)
        assert message in result.output, (extra, result.output)
        assert "Traceback" not in result.output
    result = runner.invoke(lakehouse, ["deliver", "--metadata", "nowhere", "--objects", "file:///tmp",
                                       "--topic", "t", "--delta", str(tmp_path / "typo")])
    assert result.exit_code == 2 and "--metadata" in result.output, result.output
    assert not (tmp_path / "typo").exists()  # checked before the table is created
    result = runner.invoke(lakehouse, ["deliver", *_urls(standalone), "--topic", "bad/topic",
                                       "--delta", str(tmp_path / "d")])
    assert result.exit_code == 2 and "--topic" in result.output, result.output


@pytest.mark.parametrize("interval", [[], ["--interval", "5"]])
def test_a_topic_that_does_not_exist_is_an_error_and_creates_no_table(standalone, tmp_path, interval):
    """One readable line, exit code 1, and neither a Delta directory nor an Iceberg table."""
    for target in (["--delta", str(tmp_path / "d")], _iceberg_args(tmp_path, "streams.never")):
        proc = subprocess.run([sys.executable, "-m", "nereus.lakehouse.cli", "deliver", *_urls(standalone),
                               "--topic", "never-written", *target, "--no-progress", *interval],
                              cwd=REPO, capture_output=True, text=True, timeout=DEADLINE)
        assert proc.returncode == 1, proc.stderr
        assert proc.stderr.strip() == "Error: topic persistent://public/default/never-written does not exist"
    assert not (tmp_path / "d").exists()
    catalog = load_catalog("lake", **iceberg_properties(tmp_path))
    assert not catalog.table_exists("streams.never")
    assert not (tmp_path / "warehouse").exists()


@pytest.mark.parametrize("kind", ["delta", "hudi", "iceberg"])
def test_targets_refuse_to_rebase_over_a_concurrent_commit(tmp_path, kind):
    """Two writers that read the same positions: the second commit fails instead of appending
    the same offsets again on top of the first (which a rebasing retry would do)."""
    from nereus.lakehouse.deliver import ARROW_SCHEMA, Position, TargetConflict, to_arrow
    from nereus.lakehouse.delta_target import DeltaTarget
    from nereus.lakehouse.hudi_target import HudiTarget
    from nereus.lakehouse.iceberg_target import IcebergTarget

    def open_target():
        if kind == "delta":
            return DeltaTarget(str(tmp_path / "race"))
        if kind == "hudi":
            return HudiTarget(str(tmp_path / "race"))
        return IcebergTarget("lake", iceberg_properties(tmp_path), "streams.race")

    first, second = open_target(), open_target()
    assert first.positions("t", [0]) == second.positions("t", [0]) == {}
    rows = to_arrow([("t", 0, o, None, None, None, b"v", {}, "p") for o in range(3)])
    first.append("t", rows, {0: Position(0, 3)})
    with pytest.raises(TargetConflict):
        second.append("t", rows, {0: Position(0, 3)})
    assert second.positions("t", [0]) == {0: Position(0, 3)}
    second.append("t", ARROW_SCHEMA.empty_table(), {0: Position(0, 4)})  # after a re-read, it commits
    assert first.positions("t", [0, 1]) == {0: Position(0, 4)}
    assert sorted(o for _, o in target_rows(kind, tmp_path, "race")) == [0, 1, 2]


@pytest.mark.parametrize("kind", ["delta", "hudi", "iceberg"])
def test_two_jobs_on_one_table(standalone, mixed, tmp_path, kind):
    """Two jobs started together on the same table race on every commit; each lost race
    re-plans from the table, so the table still holds every record once."""
    target = target_args(kind, tmp_path, "two")
    procs = [spawn(standalone, MIXED, target, "--batch-records", "30") for _ in range(2)]
    for proc in procs:
        code = proc.wait(timeout=DEADLINE)
        output = proc.stdout.read().decode()
        assert code == 0 or "other writers keep committing" in output, output
    check_exactly_once(target_rows(kind, tmp_path, "two"), committed(standalone, MIXED), mixed)


def test_hudi_delivery_reads_as_snapshot_and_incrementally(standalone, mixed, tmp_path):
    """hudi-rs reads the delivered table: the snapshot holds every record once with Hudi's meta
    fields, and an incremental read after a commit's completion time returns exactly the
    records committed later (Hudi 1.x ranges incremental reads by completion time)."""
    import pyarrow as pa

    from nereus.lakehouse.hudi_table import HudiTable
    from nereus.lakehouse.hudi_target import OFFSETS_KEY

    path = tmp_path / "hudi"
    target = ["--hudi", str(path)]
    assert delivered_count(deliver(standalone, MIXED, target, "--batch-records", "40")) == len(mixed.expected)
    before = set(committed(standalone, MIXED))
    check_exactly_once(hudi_rows(path), committed(standalone, MIXED), mixed)
    first_run = HudiTable(str(path)).completed()
    assert delivered_count(deliver(standalone, MIXED, target)) == 0  # nothing new: no commit either
    assert HudiTable(str(path)).completed() == first_run

    added = mixed.wave()
    assert delivered_count(deliver(standalone, MIXED, target)) == added
    truth = committed(standalone, MIXED)
    check_exactly_once(hudi_rows(path), truth, mixed)

    table = hudi.HudiTableBuilder.from_base_uri(str(path)).build()
    assert table.table_type == "COPY_ON_WRITE" and table.table_name == "hudi"
    assert [i.timestamp for i in table.get_timeline().get_completed_commits()] == \
        [i.time for i in HudiTable(str(path)).completed()]
    options = (hudi.HudiReadOptions().with_query_type(hudi.HudiQueryType.Incremental)
               .with_start_timestamp(first_run[-1].completed))
    later = pa.Table.from_batches(table.read(options))
    assert {(r["partition"], r["offset"]) for r in later.to_pylist()} == set(truth) - before
    snapshot = pa.Table.from_batches(table.read())
    keys = snapshot["_hoodie_record_key"].to_pylist()
    assert len(set(keys)) == len(keys) == len(truth)
    assert set(snapshot["_hoodie_commit_time"].to_pylist()) <= {i.time for i in HudiTable(str(path)).completed()}
    latest = HudiTable(str(path))
    offsets = json.loads(latest.metadata(latest.completed()[-1])["extraMetadata"][OFFSETS_KEY])[MIXED]
    assert {int(p): end for p, (_, end) in offsets.items()} == {
        p: 1 + max(o for q, o in mixed.expected if q == p) for p in range(PARTITIONS)}


def test_hudi_commit_decided_by_a_killed_job_is_completed_by_the_next(standalone, mixed, tmp_path):
    """A job killed after it won the commit (its claim is written) but before completing the
    instant: Hudi readers do not see that commit yet; the next job completes it from the
    inflight file and resumes after it, so no row is lost or written twice."""
    path = tmp_path / "hudi"
    target = ["--hudi", str(path)]
    run_killed(standalone, MIXED, target, "hudi-decided:2", "--batch-records", "25")
    assert len(hudi_rows(path)) == 25  # the second commit was decided, not completed
    deliver(standalone, MIXED, target, "--batch-records", "25")
    check_exactly_once(hudi_rows(path), committed(standalone, MIXED), mixed)
