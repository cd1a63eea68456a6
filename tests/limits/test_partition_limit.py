"""maxNumPartitionsPerPartitionedTopic: a real standalone configured by file, refused by admin REST and Kafka."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from nereus.broker.options import PARTITION_CEILING
from nereus.topics.partitioned import MAX_PARTITIONS, partition_limit
from tests.cli.processes import fail
from tests.standalone_process import Standalone

LIMIT = 4


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    root = tmp_path_factory.mktemp("partition-limit")
    config = root / "standalone.conf"
    config.write_text(f"maxNumPartitionsPerPartitionedTopic={LIMIT}\ndefaultNumPartitions=2\n")
    node = Standalone(root / "data", ["--compaction-interval", "0", "--config", str(config)])
    node.start()
    yield node
    node.stop()


def call(node: Standalone, method: str, path: str, body=None) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{node.http}/admin/v2{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=15) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_admin_rest_refuses_more_partitions_than_the_limit_as_pulsar_does(node):
    topic = "/persistent/public/default/capped"
    status, text = call(node, "PUT", f"{topic}/partitions", LIMIT + 1)
    assert status == 406 and f"less than or equal to {LIMIT}" in json.loads(text)["reason"], text
    assert json.loads(call(node, "GET", f"{topic}/partitions")[1])["partitions"] == 0  # nothing was created
    assert call(node, "PUT", f"{topic}/partitions", LIMIT - 1)[0] == 204
    status, text = call(node, "POST", f"{topic}/partitions", LIMIT + 1)
    assert status == 406 and f"less than or equal to {LIMIT}" in text, text
    assert json.loads(call(node, "GET", f"{topic}/partitions")[1])["partitions"] == LIMIT - 1
    assert call(node, "POST", f"{topic}/partitions", LIMIT)[0] == 204
    assert json.loads(call(node, "GET", f"{topic}/partitions")[1])["partitions"] == LIMIT


def test_a_namespace_auto_creation_override_above_the_limit_is_406(node):
    override = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": LIMIT + 1}
    status, text = call(node, "POST", "/namespaces/public/default/autoTopicCreation", override)
    assert status == 406 and f"less than or equal to {LIMIT}" in text, text
    override["defaultNumPartitions"] = LIMIT
    assert call(node, "POST", "/namespaces/public/default/autoTopicCreation", override)[0] == 204
    assert call(node, "DELETE", "/namespaces/public/default/autoTopicCreation")[0] == 204


def test_kafka_create_topics_and_create_partitions_answer_invalid_partitions(node):
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    error = admin.create_topics([NewTopic("k-capped", LIMIT + 1)], operation_timeout=20)["k-capped"].exception(20)
    assert error is not None and error.args[0].code() == KafkaError.INVALID_PARTITIONS
    assert f"at most {LIMIT}" in error.args[0].str() and "maxNumPartitionsPerPartitionedTopic" in error.args[0].str()
    admin.create_topics([NewTopic("k-capped", 2)], operation_timeout=20)["k-capped"].result(20)
    future = admin.create_partitions([NewPartitions("k-capped", LIMIT + 1)], operation_timeout=20)["k-capped"]
    error = future.exception(20)
    assert error is not None and error.args[0].code() == KafkaError.INVALID_PARTITIONS
    admin.create_partitions([NewPartitions("k-capped", LIMIT)], operation_timeout=20)["k-capped"].result(20)
    metadata = admin.list_topics("k-capped", timeout=20)
    assert len(metadata.topics["k-capped"].partitions) == LIMIT


@pytest.mark.parametrize("text, expected", [
    (f"maxNumPartitionsPerPartitionedTopic={LIMIT}\ndefaultNumPartitions={LIMIT + 4}\n",
     ["defaultNumPartitions", f"{LIMIT + 4}", "maxNumPartitionsPerPartitionedTopic", f"{LIMIT}"]),
    (f"maxNumPartitionsPerPartitionedTopic={MAX_PARTITIONS + 1}\n",
     ["maxNumPartitionsPerPartitionedTopic", f"{MAX_PARTITIONS + 1}"]),
])
def test_a_default_above_the_limit_or_a_limit_above_the_ceiling_stops_start_up(tmp_path: Path, text, expected):
    config = tmp_path / "standalone.conf"
    config.write_text(text)
    code, last, stderr = fail(["standalone", "--config", str(config), "--data-dir", str(tmp_path / "data")])
    assert code != 0 and "Traceback" not in stderr, stderr[-3000:]
    assert last.startswith("Error: "), stderr[-3000:]
    for part in expected:
        assert part in last, (part, last)


def test_zero_is_pulsar_s_no_limit_which_is_our_ceiling():
    assert PARTITION_CEILING == MAX_PARTITIONS
    assert partition_limit(0) == MAX_PARTITIONS and partition_limit(LIMIT) == LIMIT
