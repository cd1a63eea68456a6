"""A Hudi copy-on-write table (table version 8, timeline layout 2), written without a JVM.

Layout below the table's base URI (non-partitioned: base files sit at the top):

    .hoodie/hoodie.properties               the table config, created once (put-if-absent)
    .hoodie/timeline/T.commit.requested     an instant T asked for
    .hoodie/timeline/T.inflight             ... being written: holds its commit metadata
    .hoodie/timeline/T_C.commit             ... completed at C (Avro ``HoodieCommitMetadata``)
    .hoodie/.nereus/after-L                 the claim that decided which instant follows L
    <fileId>_<writeToken>_<T>.parquet       base files, Hudi's five meta columns first

Hudi readers see a base file only once its instant has completed, so a crash leaves at
most files nobody reads. Two writers must not both build on the same latest commit L
(each would record positions computed from L, duplicating rows): a commit is decided by
creating ``after-L`` (put-if-absent, naming T and its completion time C) and only then
completed. Whoever finds a claim whose instant is not completed (its writer died or
stalled after deciding) completes it from the inflight file: the claim fixes the file
name, so every finisher writes the same object. A writer that loses the claim raises
``CommitConflict`` and nothing of its commit is visible.
"""

from __future__ import annotations

import io
import json
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import fastavro
import obstore
import pyarrow as pa
import pyarrow.parquet as pq
from obstore.exceptions import AlreadyExistsError, NotFoundError
from obstore.store import from_url

TABLE_VERSION = 8
TIMELINE = ".hoodie/timeline/"
CLAIMS = ".hoodie/.nereus/"
PROPERTIES = ".hoodie/hoodie.properties"
WRITE_TOKEN = "0-0-0"
_CLIENT_KEYS = frozenset({"allow_http", "allow_invalid_certificates", "connect_timeout", "timeout", "proxy_url",
                          "user_agent", "pool_idle_timeout"})
META_FIELDS = ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key", "_hoodie_partition_path",
               "_hoodie_file_name")
META_SCHEMA = pa.schema([pa.field(name, pa.string()) for name in META_FIELDS])

_NULLABLE_STRING = ["null", "string"]
_NULLABLE_LONG = ["null", "long"]
# The fields of Hudi's HoodieWriteStat/HoodieCommitMetadata records this writer fills;
# readers resolve by name, the rest take their defaults.
_WRITE_STAT = {
    "type": "record", "name": "HoodieWriteStat", "namespace": "org.apache.hudi.avro.model",
    "fields": [{"name": name, "type": kind, "default": None} for name, kind in [
        ("fileId", _NULLABLE_STRING), ("path", _NULLABLE_STRING), ("prevCommit", _NULLABLE_STRING),
        ("numWrites", _NULLABLE_LONG), ("numDeletes", _NULLABLE_LONG), ("numUpdateWrites", _NULLABLE_LONG),
        ("numInserts", _NULLABLE_LONG), ("totalWriteBytes", _NULLABLE_LONG), ("totalWriteErrors", _NULLABLE_LONG),
        ("partitionPath", _NULLABLE_STRING), ("fileSizeInBytes", _NULLABLE_LONG)]],
}
_COMMIT_METADATA = fastavro.parse_schema({
    "type": "record", "name": "HoodieCommitMetadata", "namespace": "org.apache.hudi.avro.model",
    "fields": [
        {"name": "partitionToWriteStats", "default": None,
         "type": ["null", {"type": "map", "values": {"type": "array", "items": _WRITE_STAT}}]},
        {"name": "compacted", "type": ["null", "boolean"], "default": None},
        {"name": "extraMetadata", "type": ["null", {"type": "map", "values": "string"}], "default": None},
        {"name": "version", "type": ["null", "int"], "default": None},
        {"name": "operationType", "type": ["null", "string"], "default": None},
    ],
})


class CommitConflict(Exception):
    """Another writer decided the commit that follows the one this commit was built on."""


@dataclass(frozen=True, slots=True)
class Instant:
    """A completed commit: requested at ``time``, completed at ``completed``."""

    time: str
    completed: str

    @property
    def file_name(self) -> str:
        return f"{self.time}_{self.completed}.commit"


@dataclass(frozen=True, slots=True)
class WriteStat:
    """One base file a commit wrote: a new file group, or a new slice of ``file_id``'s."""

    file_id: str
    path: str
    prev_commit: str | None
    writes: int
    inserts: int
    deletes: int
    size: int

    def to_avro(self) -> dict:
        return {"fileId": self.file_id, "path": self.path, "prevCommit": self.prev_commit or "null",
                "numWrites": self.writes, "numDeletes": self.deletes, "numUpdateWrites": 0,
                "numInserts": self.inserts, "totalWriteBytes": self.size, "totalWriteErrors": 0,
                "partitionPath": "", "fileSizeInBytes": self.size}


def instant_time(millis: int) -> str:
    """Hudi's instant format of a UTC time in milliseconds: ``yyyyMMddHHmmssSSS``."""
    moment = datetime.fromtimestamp(millis // 1000, timezone.utc)
    return moment.strftime("%Y%m%d%H%M%S") + f"{millis % 1000:03d}"


def _now_millis() -> int:
    return time.time_ns() // 1_000_000


def encode_commit_metadata(operation: str, stats: Sequence[WriteStat], extra: Mapping[str, str]) -> bytes:
    out = io.BytesIO()
    record = {"partitionToWriteStats": {"": [s.to_avro() for s in stats]} if stats else {},
              "compacted": False, "extraMetadata": dict(extra), "version": 1, "operationType": operation}
    fastavro.writer(out, _COMMIT_METADATA, [record])
    return out.getvalue()


def decode_commit_metadata(data: bytes) -> dict:
    for record in fastavro.reader(io.BytesIO(data)):
        return record
    raise ValueError("a Hudi commit metadata file without a record")


def store_for(uri: str, options: Mapping[str, str] | None = None):
    """An obstore store rooted at ``uri`` (a local path, ``file://`` or an object-store URL)."""
    if "://" not in uri:
        os.makedirs(uri, exist_ok=True)
        uri = "file://" + os.path.abspath(uri)
    if uri.startswith("file://"):
        return from_url(uri, mkdir=True)
    # Delta-style keys (AWS_REGION, AWS_ENDPOINT_URL, AWS_ALLOW_HTTP, ...): HTTP client
    # settings go to obstore's client options, the rest to the store's own config.
    config, client = {}, {}
    for key, value in (options or {}).items():
        key = key.lower()
        bare = key.removeprefix("aws_")
        if bare in _CLIENT_KEYS:
            client[bare] = value
        else:
            config[key] = value
    return from_url(uri, config=config, client_options=client)


class HudiTable:
    """The table at ``uri``: its config, timeline and base files."""

    def __init__(self, uri: str, options: Mapping[str, str] | None = None) -> None:
        self.uri = uri
        self._store = store_for(uri, options)

    # -- objects

    def _get(self, path: str) -> bytes | None:
        try:
            return bytes(obstore.get(self._store, path).bytes())
        except (NotFoundError, FileNotFoundError):
            return None

    def _create(self, path: str, data: bytes) -> bool:
        """Write ``path`` unless it exists; False if it did."""
        try:
            obstore.put(self._store, path, data, mode="create")
            return True
        except AlreadyExistsError:
            return False

    def _names(self, prefix: str) -> list[str]:
        return [m["path"][len(prefix):] for batch in obstore.list(self._store, prefix=prefix) for m in batch]

    # -- config

    def properties(self) -> dict[str, str] | None:
        data = self._get(PROPERTIES)
        if data is None:
            return None
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#") and "=" in line:
                key, _, value = line.partition("=")
                out[key.strip()] = value.strip()
        return out

    def create(self, properties: Mapping[str, str]) -> dict[str, str]:
        """Create the table with ``properties`` unless it exists; the stored properties."""
        text = "".join(f"{key}={value}\n" for key, value in sorted(properties.items()))
        self._create(PROPERTIES, text.encode())
        return self.properties() or {}

    # -- timeline

    def completed(self) -> list[Instant]:
        """Completed commits, oldest first."""
        out = []
        for name in self._names(TIMELINE):
            stem, _, action = name.partition(".")
            if action == "commit" and "_" in stem:
                requested, _, completed = stem.partition("_")
                out.append(Instant(requested, completed))
        return sorted(out, key=lambda i: i.time)

    def metadata(self, instant: Instant) -> dict:
        data = self._get(TIMELINE + instant.file_name)
        if data is None:
            raise FileNotFoundError(f"{self.uri}: commit {instant.time} is gone")
        return decode_commit_metadata(data)

    def latest(self) -> Instant | None:
        """The latest completed commit, after completing any commit already decided on top of it."""
        instants = self.completed()
        latest = instants[-1] if instants else None
        while True:
            claim = self._get(CLAIMS + _claim_name(latest))
            if claim is None:
                return latest
            decided = Instant(**json.loads(claim))
            if decided not in instants:
                self._complete(decided)
            latest = decided

    def _complete(self, instant: Instant) -> None:
        metadata = self._get(f"{TIMELINE}{instant.time}.inflight")
        if metadata is None:
            raise FileNotFoundError(f"{self.uri}: decided commit {instant.time} has no inflight file")
        self._create(TIMELINE + instant.file_name, metadata)

    # -- writing

    def begin(self, base: Instant | None) -> str:
        """Reserve a requested time after ``base``'s (instant times order the timeline) for one commit.

        The reservation is the ``.commit.requested`` file, created put-if-absent: no two
        writers ever write base files of the same instant.
        """
        millis = _now_millis()
        if base is not None:
            millis = max(millis, _millis(base.time) + 1)
        while not self._create(f"{TIMELINE}{instant_time(millis)}.commit.requested", b""):
            millis += 1
        return instant_time(millis)

    def write_base_file(self, file_id: str, at: str, records: pa.Table, keys: Sequence[str],
                        seqnos: Sequence[str] | None = None, commit_times: Sequence[str] | None = None) -> str:
        """Write ``records`` as a base file of ``file_id`` at instant ``at``; its path.

        ``commit_times`` and ``seqnos`` keep the meta fields of records carried over from an
        older slice (a copy-on-write rewrite keeps when each record was first committed).
        """
        name = f"{file_id}_{WRITE_TOKEN}_{at}.parquet"
        n = records.num_rows
        meta = [pa.array(commit_times if commit_times is not None else [at] * n, pa.string()),
                pa.array(seqnos if seqnos is not None else [f"{at}_0_{i}" for i in range(n)], pa.string()),
                pa.array(keys, pa.string()), pa.array([""] * n, pa.string()), pa.array([name] * n, pa.string())]
        table = pa.Table.from_arrays(meta + list(records.columns),
                                     schema=pa.schema(list(META_SCHEMA) + list(records.schema)))
        out = io.BytesIO()
        pq.write_table(table, out, compression="snappy")
        obstore.put(self._store, name, out.getvalue())
        return name

    def read_base_file(self, path: str, columns: Sequence[str] | None = None) -> pa.Table:
        data = self._get(path)
        if data is None:
            raise FileNotFoundError(f"{self.uri}: base file {path} is gone")
        return pq.read_table(pa.BufferReader(data), columns=list(columns) if columns else None)

    def size_of(self, path: str) -> int:
        return obstore.head(self._store, path)["size"]

    def commit(self, base: Instant | None, at: str, operation: str, stats: Sequence[WriteStat],
               extra: Mapping[str, str], on_decided: Callable[[], None] = lambda: None) -> Instant:
        """Complete the commit begun at ``at`` on top of ``base``; ``CommitConflict`` if another
        writer's commit follows ``base``."""
        metadata = encode_commit_metadata(operation, stats, extra)
        obstore.put(self._store, f"{TIMELINE}{at}.inflight", metadata)
        instant = Instant(at, instant_time(max(_now_millis(), _millis(at))))
        if not self._create(CLAIMS + _claim_name(base), json.dumps({"time": instant.time,
                                                                    "completed": instant.completed}).encode()):
            raise CommitConflict(f"{self.uri}: another writer committed after {base.time if base else 'creation'}")
        on_decided()
        self._create(TIMELINE + instant.file_name, metadata)
        return instant


def new_file_id() -> str:
    return f"{uuid.uuid4()}-0"


def _claim_name(base: Instant | None) -> str:
    return f"after-{base.time}" if base is not None else "after-creation"


def _millis(instant: str) -> int:
    moment = datetime.strptime(instant[:14], "%Y%m%d%H%M%S").replace(tzinfo=timezone.utc)
    return int(moment.timestamp()) * 1000 + int(instant[14:17] or 0)
