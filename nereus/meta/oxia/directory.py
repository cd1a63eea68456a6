"""Oxia shard ids for the engine's namespaces.

Oxia shard ids are unique across namespaces (a request names its shard, and not
every client says which namespace it means), so each namespace gets a contiguous
block of ids: ``default`` first at 0, the others in order of first use. The blocks
are persisted next to the engine's data so that ids stay stable across restarts,
which clients holding a shard map rely on.
"""

from __future__ import annotations

import json
import logging
import os

from ..embedded import Engine, Namespace
from ..embedded.engine import DEFAULT_NAMESPACE
from ..embedded.shard import Shard
from ..keys import hash_ranges
from .proto import client_pb2 as pb

log = logging.getLogger(__name__)

FILE_NAME = "OXIA_SHARDS.json"


class ShardDirectory:
    """Maps global shard ids to (namespace, shard) and builds shard maps."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self._path = os.path.join(engine.data_dir, FILE_NAME) if engine.durable else None
        self._first: dict[str, int] = {}  # namespace -> first shard id
        self._count: dict[str, int] = {}
        if self._path and os.path.exists(self._path):
            with open(self._path) as f:
                self._first = {k: int(v) for k, v in json.load(f).items()}
        self.namespace(DEFAULT_NAMESPACE)

    def namespace(self, name: str) -> Namespace:
        """The namespace (created on demand if the engine allows it), with its ids allocated."""
        ns = self._engine.namespace(name)
        if name not in self._first:
            self._first[name] = max((self._first[n] + self._size(n) for n in self._first), default=0)
            self._persist()
            log.info("namespace %s: oxia shard ids %d..%d", name, self._first[name],
                     self._first[name] + len(ns.shards) - 1)
        self._count[name] = len(ns.shards)
        return ns

    def known(self, name: str) -> bool:
        """True if ``name`` has shard ids already (used before, maybe in an earlier run)."""
        return name in self._first

    def _size(self, name: str) -> int:
        if name not in self._count:
            self._count[name] = len(self._engine.namespace(name).shards)
        return self._count[name]

    def _persist(self) -> None:
        if self._path is None:
            return
        tmp = self._path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self._first, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)

    def shard(self, shard_id: int, namespace: str | None) -> tuple[Namespace, Shard] | None:
        """The shard with global id ``shard_id``; None if unknown (or not in ``namespace``)."""
        names = [namespace] if namespace else list(self._first)
        for name in names:
            if name not in self._first:
                continue
            first = self._first[name]
            if first <= shard_id < first + self._size(name):
                ns = self.namespace(name)
                return ns, ns.shards[shard_id - first]
        return None

    def shard_id(self, namespace: str, index: int) -> int:
        return self._first[namespace] + index

    def assignments(self, name: str, leader: str) -> pb.ShardAssignments:
        ns = self.namespace(name)
        first = self._first[name]
        msg = pb.ShardAssignments()
        nsa = msg.namespaces[name]
        nsa.shard_key_router = pb.XXHASH3
        for i, (lo, hi) in enumerate(hash_ranges(len(ns.shards))):
            nsa.assignments.append(pb.ShardAssignment(
                shard=first + i, leader=leader,
                int32_hash_range=pb.Int32HashRange(min_hash_inclusive=lo, max_hash_inclusive=hi)))
        return msg
