"""The Hudi table writer on its own: on a local directory and on S3 (a real moto server), read
back with hudi-rs; commit races, a decided commit completed by another writer, and tables
that are not delivered tables."""

from __future__ import annotations

from pathlib import Path

import pytest

hudi = pytest.importorskip("hudi")

import pyarrow as pa  # noqa: E402

from nereus.lakehouse.deliver import ARROW_SCHEMA, Position, TargetConflict, TargetError, to_arrow  # noqa: E402
from nereus.lakehouse.hudi_table import CommitConflict, HudiTable, WriteStat  # noqa: E402
from nereus.lakehouse.hudi_target import HudiTarget  # noqa: E402
from tests.moto_server import BUCKET, MotoServer  # noqa: E402


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory):
    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    endpoint = server.start()
    yield {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true"}
    server.stop()


def rows(partition: int, first: int, end: int) -> pa.Table:
    return to_arrow([("t", partition, o, None, None, b"k", b"v%d" % o, {"h": "1"}, "p") for o in range(first, end)])


def read(uri: str, options: dict[str, str] | None = None) -> list[tuple[int, int]]:
    builder = hudi.HudiTableBuilder.from_base_uri(uri)
    if options:
        builder = builder.with_storage_options({k.lower(): v for k, v in options.items()})
    batches = builder.build().read()
    table = pa.Table.from_batches(batches) if batches else ARROW_SCHEMA.empty_table()
    return sorted(zip(table["partition"].to_pylist(), table["offset"].to_pylist()))


@pytest.mark.parametrize("where", ["local", "s3"])
def test_two_writers_on_one_commit_one_wins(tmp_path: Path, request, where):
    options = request.getfixturevalue("s3") if where == "s3" else None
    uri = f"s3://{BUCKET}/hudi-race-{tmp_path.name}" if where == "s3" else str(tmp_path / "race")
    first, second = HudiTarget(uri, options), HudiTarget(uri, options)
    assert first.positions("t", [0]) == second.positions("t", [0]) == {}
    first.append("t", rows(0, 0, 3), {0: Position(0, 3)})
    with pytest.raises(TargetConflict):
        second.append("t", rows(0, 0, 3), {0: Position(0, 3)})
    assert read(uri, options) == [(0, 0), (0, 1), (0, 2)]  # the loser's base file is never read
    assert second.positions("t", [0]) == {0: Position(0, 3)}
    second.append("t", rows(0, 3, 5), {0: Position(0, 5)})
    first.positions("t", [0])
    first.delete_below("t", {0: Position(2, 5)})
    assert read(uri, options) == [(0, 2), (0, 3), (0, 4)]
    assert HudiTarget(uri, options).positions("t", [0, 1]) == {0: Position(2, 5)}


def test_a_decided_commit_is_completed_by_whoever_reads_the_table_next(tmp_path: Path):
    """The writer stops between deciding and completing (killed, or a stalled zombie): readers
    do not see the commit, the next writer completes it, and the zombie completing it later
    writes the same instant file again (no second commit)."""
    uri = str(tmp_path / "zombie")
    writer = HudiTarget(uri)
    writer.positions("t", [0])
    writer.append("t", rows(0, 0, 2), {0: Position(0, 2)})

    decided: list[str] = []
    table = HudiTable(uri)
    base = table.latest()
    at = table.begin(base)
    path = table.write_base_file("zombie-0", at, rows(0, 2, 4), ["a", "b"])
    stat = WriteStat("zombie-0", path, None, 2, 2, 0, table.size_of(path))

    class Stalled(Exception):
        pass

    def stall():
        decided.append(at)
        raise Stalled

    with pytest.raises(Stalled):
        table.commit(base, at, "insert", [stat], {"nereus.offsets": '{"t":{"0":[0,4]}}'}, on_decided=stall)
    assert read(uri) == [(0, 0), (0, 1)]
    assert HudiTarget(uri).positions("t", [0]) == {0: Position(0, 4)}  # completed by this reader
    assert read(uri) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    completed = HudiTable(uri).completed()
    with pytest.raises(CommitConflict):  # the zombie waking up cannot decide on the same base again
        table.commit(base, table.begin(base), "insert", [], {})
    assert HudiTable(uri).completed() == completed and len(completed) == 2


def test_a_table_that_is_not_a_delivered_table_is_refused(tmp_path: Path):
    other = tmp_path / "other"
    (other / ".hoodie").mkdir(parents=True)
    (other / ".hoodie" / "hoodie.properties").write_text(
        "hoodie.table.name=other\nhoodie.table.type=MERGE_ON_READ\nhoodie.table.recordkey.fields=id\n")
    with pytest.raises(TargetError, match="not a delivered table"):
        HudiTarget(str(other))


@pytest.mark.parametrize("uri", ["gs://bucket/t", "s3://bucket/t"])
def test_an_unusable_object_store_is_a_readable_target_error(uri):
    options = {"AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}  # gs: keys of another store; s3: nobody there
    with pytest.raises(TargetError, match=f"the hudi table {uri}: "):
        HudiTarget(uri, options)
