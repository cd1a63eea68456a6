"""lastMessageId, examinemessage, get message by id and namespace bundles over REST and ``nereus admin``,
against a standalone fed by the official client (batched and unbatched)."""

from __future__ import annotations

import urllib.error
import urllib.request

from tests.admin_cli.conftest import Admin as CliAdmin


def _raw(standalone, path: str):
    """(status, headers, body) of a GET below ``/admin/v2``."""
    try:
        with urllib.request.urlopen(f"{standalone.http}/admin/v2{path}", timeout=15) as response:
            return response.status, dict(response.headers.items()), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers.items()), exc.read()


def _path(topic: str) -> str:
    return "/persistent/" + topic.split("://", 1)[1]


def _produce(client, topic: str, *, batched: bool) -> list:
    producer = client.create_producer(topic, batching_enabled=batched, batching_max_messages=3,
                                      batching_max_publish_delay_ms=1000 if batched else 10,
                                      producer_name="p-test")
    ids = []
    if batched:
        done = []
        for i in range(3):
            producer.send_async(f"m{i}".encode(), lambda res, mid: done.append(mid), properties={"k": f"v{i}"},
                                partition_key=f"key{i}")
        producer.flush()
        ids = done
    else:
        for i in range(3):
            ids.append(producer.send(f"m{i}".encode(), properties={"k": f"v{i}"}, partition_key=f"key{i}"))
    producer.close()
    return ids


def test_last_message_id_unbatched_and_empty(admin, client, topic):
    assert admin.ok("PUT", _path(topic)) is None
    empty = admin.ok("GET", _path(topic) + "/lastMessageId")
    assert empty["entryId"] == -1 and empty["partitionIndex"] == -1
    ids = _produce(client, topic, batched=False)
    last = admin.ok("GET", _path(topic) + "/lastMessageId")
    assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
    assert last["partitionIndex"] == -1 and "batchIndex" not in last


def test_last_message_id_batched(admin, client, topic):
    ids = _produce(client, topic, batched=True)
    assert len({mid.entry_id() for mid in ids}) == 1  # one batch
    last = admin.ok("GET", _path(topic) + "/lastMessageId")
    assert (last["ledgerId"], last["entryId"], last["batchIndex"]) == (
        ids[-1].ledger_id(), ids[-1].entry_id(), ids[-1].batch_index())
    assert last["batchSize"] == 3


def test_examine_message_unbatched(standalone, client, topic):
    ids = _produce(client, topic, batched=False)
    status, headers, body = _raw(standalone, _path(topic) + "/examinemessage?initialPosition=earliest"
                                                            "&messagePosition=2")
    assert status == 200 and body == b"m1"
    assert headers["X-Pulsar-Message-ID"] == f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    assert headers["X-Pulsar-PROPERTY-k"] == "v1"
    assert headers["X-Pulsar-partition-key"] == "key1"
    assert headers["X-Pulsar-producer-name"] == "p-test"
    assert headers["X-Pulsar-publish-time"].endswith("Z")
    assert "X-Pulsar-num-batch-message" not in headers
    status, headers, body = _raw(standalone, _path(topic) + "/examinemessage?initialPosition=latest")
    assert status == 200 and body == b"m2"
    # by id, the same message
    status, headers, body = _raw(standalone, _path(topic) + f"/ledger/{ids[0].ledger_id()}/entry/{ids[0].entry_id()}")
    assert status == 200 and body == b"m0" and headers["X-Pulsar-sequence-id"] == "0"


def test_examine_message_batched(standalone, client, topic):
    ids = _produce(client, topic, batched=True)
    status, headers, body = _raw(standalone, _path(topic) + "/examinemessage?initialPosition=earliest")
    assert status == 200
    assert headers["X-Pulsar-num-batch-message"] == "3"
    assert int(headers["X-Pulsar-batch-size"]) > len(body) > 0
    assert headers["X-Pulsar-Message-ID"] == f"{ids[0].ledger_id()}:{ids[0].entry_id()}"
    for i in range(3):
        assert f"m{i}".encode() in body and f"key{i}".encode() in body  # the batch with its message metadata
    status, _, by_id = _raw(standalone, _path(topic) + f"/ledger/{ids[0].ledger_id()}/entry/{ids[0].entry_id()}")
    assert status == 200 and by_id == body


def test_bad_input(admin, standalone, client, topic):
    missing = _path(topic.replace("/t-", "/missing-"))
    for suffix in ("/lastMessageId", "/examinemessage", "/ledger/1/entry/0"):
        assert admin.get(missing + suffix)[0] == 404
    assert admin.ok("PUT", _path(topic)) is None
    status, _, body = _raw(standalone, _path(topic) + "/examinemessage")
    assert status == 412 and b"zero" in body  # nothing to examine
    ids = _produce(client, topic, batched=False)
    assert _raw(standalone, _path(topic) + "/examinemessage?initialPosition=middle")[0] == 412
    assert _raw(standalone, _path(topic) + "/examinemessage?messagePosition=x")[0] == 400
    assert _raw(standalone, _path(topic) + "/examinemessage?messagePosition=4")[0] == 412
    ledger = ids[0].ledger_id()
    assert _raw(standalone, _path(topic) + f"/ledger/{ledger + 1000}/entry/0")[0] == 404
    assert _raw(standalone, _path(topic) + f"/ledger/{ledger}/entry/99")[0] == 404
    assert admin.ok("PUT", _path(topic) + "-p/partitions", 2) is None
    for suffix in ("/lastMessageId", "/examinemessage", f"/ledger/{ledger}/entry/0"):
        assert admin.get(_path(topic) + "-p" + suffix)[0] == 405
    # a partition answers as any topic
    partition = admin.ok("GET", _path(topic) + "-p-partition-1/lastMessageId")
    assert partition["entryId"] == -1 and partition["partitionIndex"] == 1


def test_bundles(admin):
    assert admin.ok("GET", "/namespaces/public/default/bundles") == {
        "boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}
    assert admin.get("/namespaces/public/nope/bundles")[0] == 404


def test_cli(standalone, client, topic):
    cli = CliAdmin(standalone.http)
    ids = _produce(client, topic, batched=False)
    assert cli.json("topics", "last-message-id", topic)["entryId"] == ids[-1].entry_id()
    out = cli.ok("topics", "examine-message", topic, "-i", "earliest", "-m", "1")
    assert "m0" in out and "Properties:" in out and "k=v0" in out
    out = cli.ok("topics", "get-message-by-id", topic, "-l", str(ids[2].ledger_id()), "-e", str(ids[2].entry_id()))
    assert "m2" in out
    assert cli.json("namespaces", "bundles", "public/default")["numBundles"] == 1
    missing = cli.run("topics", "examine-message", topic + "-missing")
    assert missing.exit_code != 0
