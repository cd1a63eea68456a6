"""The server targets of ``bench/fuzz.py``: the admin REST API of a real standalone and the
Oxia-protocol gRPC service of a real ``nereus oxia``; each run starts its own server.

The mutation engine's inputs are well-formed requests (Pulsar admin bodies, Oxia
request messages) with structural and byte edits; the oracles are the suite's.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import tempfile
import threading
from pathlib import Path

import grpc

from nereus.meta.oxia.proto import client_pb2 as pb
from tests.fuzz.remote_targets import (ADMIN_ROUTES, FIELDS, OXIA_METHODS, PATH_VALUES, AdminClient, check_admin,
                                       check_oxia, fill_path)
from tests.oxia.serverproc import ServerProcess
from tests.standalone_process import Standalone

from fuzz_mutate import hostile_bytes, mutate

# Re-create the fixed tenant/namespace/topic this often (a fuzzed DELETE may have taken them).
ADMIN_SETUP_EVERY = 500

# -- Admin REST --------------------------------------------------------------------

ADMIN_BODIES = [
    {"adminRoles": ["admin"], "allowedClusters": ["standalone"]},
    {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100},
    {"limitSize": 1 << 20, "limitTime": 60, "policy": "producer_request_hold"},
    {"bookkeeperEnsemble": 1, "bookkeeperWriteQuorum": 1, "bookkeeperAckQuorum": 1, "managedLedgerMaxMarkDeleteRate": 0},
    {"type": "AVRO", "schema": '{"type":"record","name":"r","fields":[{"name":"a","type":"int"}]}', "properties": {}},
    {"ledgerId": 1, "entryId": 2, "partitionIndex": -1, "batchIndex": -1, "isExcluded": False},
    {"messageId": {"ledgerId": 1, "entryId": 0}, "timestamp": 1700000000000},
    {"publishThrottlingRateInMsg": 10, "publishThrottlingRateInByte": 1000},
    {"dispatchThrottlingRateInMsg": 10, "dispatchThrottlingRateInByte": -1, "ratePeriodInSecond": 1},
    {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 2},
    {"bundles": {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}, "replication_clusters": ["standalone"]},
    {"auth_policies": {"namespace_auth": {"role": ["produce", "consume"]}}},
    {"compactionThreshold": 1024, "deduplicationEnabled": True},
    ["produce", "consume"], ["standalone"], 4, 0, -1, True, "value", {"key": "value"}, None,
]
_SCALARS = (None, True, False, 0, -1, 1, 2**31, 2**63, 2**70, -(2**70), 1.5, -0.0, 1e308, "", "x", "\x00", "../..",
            "a" * 300, [], {}, [1], {"a": None})


def _random_value(rng: random.Random, depth: int = 0):
    if depth < 2 and rng.random() < 0.2:
        if rng.random() < 0.5:
            return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(FIELDS): _random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))}
    return rng.choice(_SCALARS)


def _edit_json(rng: random.Random, value):
    """``value`` with one value in its tree replaced, one key dropped or one key added."""
    if isinstance(value, dict) and value:
        key = rng.choice(list(value))
        value = dict(value)
        roll = rng.random()
        if roll < 0.4:
            value[key] = _random_value(rng)
        elif roll < 0.6:
            del value[key]
        elif roll < 0.8:
            value[rng.choice(FIELDS)] = _random_value(rng)
        else:
            value[key] = _edit_json(rng, value[key])
        return value
    if isinstance(value, list) and value:
        value = list(value)
        value[rng.randrange(len(value))] = _random_value(rng)
        return value
    return _random_value(rng)


def _path_value(rng: random.Random, name: str) -> str:
    known = PATH_VALUES.get(name)
    roll = rng.random()
    if known is not None and roll < 0.8:
        return known
    if roll < 0.9:
        return mutate(rng, (known or "x").encode(), [b"\xff", b"/", b"%"]).decode("utf-8", "replace") or "x"
    return rng.choice(["", " ", "..", "a" * 300, "\x00", "%2F", "-1", "public", "default", "persistent:"])


def admin_input(rng: random.Random, corpus) -> tuple[str, str, bytes]:
    method, template = rng.choice(ADMIN_ROUTES)
    path = fill_path(template, lambda name: _path_value(rng, name))
    roll = rng.random()
    if roll < 0.1:
        body = b""
    else:
        value = rng.choice(ADMIN_BODIES)
        for _ in range(rng.randint(0, 3)):
            value = _edit_json(rng, value)
        body = json.dumps(value).encode()
        if roll > 0.85:
            body = hostile_bytes(rng, [body])
    return method, path, body


@contextlib.contextmanager
def admin_session():
    """A standalone and a check(request) running the suite's admin oracle against it."""
    with tempfile.TemporaryDirectory(prefix="fuzz-admin-") as tmp:
        node = Standalone(Path(tmp) / "data")
        node.start(timeout=60)
        clients: list[AdminClient] = []
        local = threading.local()  # one kept-alive connection per worker thread
        calls = itertools.count(1)

        def check(request) -> None:
            client = getattr(local, "client", None)
            if client is None:
                client = local.client = AdminClient("127.0.0.1", node.http_port)
                clients.append(client)
            if next(calls) % ADMIN_SETUP_EVERY == 1:
                client.setup()
            check_admin(client, request)

        try:
            yield check
            assert node.alive(), "the standalone died"
        finally:
            for client in clients:
                client.close()
            node.stop()


# -- Oxia gRPC ---------------------------------------------------------------------

_KEYS = ("", "/k", "/a/b", "\x00", "\U0010ffff", "a" * 700, "/k/" + "x" * 40)
_INTS = (0, 1, 2, 3, -1, -2, 2**31 - 1, 2**63 - 1, -(2**63), 40)


def _key(rng: random.Random) -> str:
    return rng.choice(_KEYS) if rng.random() < 0.7 else rng.randbytes(rng.randint(0, 12)).decode("latin-1")


def oxia_message(rng: random.Random, method: str):
    shard, i = rng.choice(_INTS), rng.choice(_INTS)
    if method == "Write":
        puts = [pb.PutRequest(key=_key(rng), value=rng.randbytes(rng.randint(0, 16)),
                              expected_version_id=rng.choice(_INTS) if rng.random() < 0.5 else None,
                              session_id=rng.choice(_INTS) if rng.random() < 0.3 else None,
                              partition_key=_key(rng) if rng.random() < 0.3 else None,
                              sequence_key_delta=[rng.getrandbits(rng.choice((1, 8, 64))) for _ in range(rng.randint(0, 2))]
                              if rng.random() < 0.3 else [])
                for _ in range(rng.randint(0, 3))]
        return pb.WriteRequest(shard=shard, puts=puts, deletes=[pb.DeleteRequest(key=_key(rng))],
                               delete_ranges=[pb.DeleteRangeRequest(start_inclusive=_key(rng), end_exclusive=_key(rng))]
                               if rng.random() < 0.3 else [])
    if method == "Read":
        return pb.ReadRequest(shard=shard, gets=[
            pb.GetRequest(key=_key(rng), include_value=True, comparison_type=rng.randint(0, 6),
                          secondary_index_name=_key(rng) if rng.random() < 0.3 else None)
            for _ in range(rng.randint(0, 3))])
    if method in ("List", "RangeScan"):
        cls = pb.ListRequest if method == "List" else pb.RangeScanRequest
        extra = {"secondary_index_name": _key(rng)} if rng.random() < 0.3 else {}
        return cls(shard=shard, start_inclusive=_key(rng), end_exclusive=_key(rng), **extra)
    if method == "CreateSession":
        return pb.CreateSessionRequest(shard=shard, session_timeout_ms=rng.choice((0, 1, 1000, 2**31 - 1)),
                                       client_identity=_key(rng))
    cls = pb.SessionHeartbeat if method == "KeepAlive" else pb.CloseSessionRequest
    return cls(shard=shard, session_id=i)


def oxia_input(rng: random.Random, corpus) -> tuple[str, bytes, bool]:
    method = rng.choice(list(OXIA_METHODS))
    raw = oxia_message(rng, method).SerializeToString()
    if rng.random() < 0.5:
        raw = hostile_bytes(rng, [raw] + corpus)
    return method, raw, rng.random() < 0.8


def oxia_corpus(rng: random.Random) -> list[bytes]:
    return [oxia_message(rng, method).SerializeToString() for method in OXIA_METHODS for _ in range(8)]


@contextlib.contextmanager
def oxia_session():
    """A ``nereus oxia`` server and a check(request) running the suite's gRPC oracle against it."""
    with tempfile.TemporaryDirectory(prefix="fuzz-oxia-") as tmp:
        server = ServerProcess(str(Path(tmp) / "oxia"), shards=4).start()
        try:
            with grpc.insecure_channel(server.address) as channel:
                grpc.channel_ready_future(channel).result(timeout=30)
                yield lambda request: check_oxia(channel, request)
            assert server.alive(), "the oxia server died"
        finally:
            server.stop()
