"""Random bodies and path values on every admin route of a real standalone: a 4xx with a JSON reason, never a 500."""

from __future__ import annotations

import json
import threading

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewPartitions, NewTopic
from hypothesis import HealthCheck, given, settings

from nereus.topics.partitioned import MAX_PARTITIONS
from tests.standalone_process import Standalone

from .remote_targets import ADMIN_ROUTES, AdminClient, admin_requests, check_admin


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    node = Standalone(tmp_path_factory.mktemp("admin-fuzz") / "data")
    node.start()
    yield node
    assert node.alive()
    node.stop()


@pytest.fixture(scope="module")
def client(node):
    client = AdminClient("127.0.0.1", node.http_port)
    client.setup()
    yield client
    client.close()


@pytest.mark.parametrize("body", [b'{"allowedClusters": 5}', b'{"adminRoles": 1.5}', b'{"adminRoles": "ab"}'])
def test_tenant_info_with_a_non_list_field_is_a_400(client, body):
    # Found by bench/fuzz.py: a number where a list belongs escaped as TypeError (500).
    status, content = client.call("PUT", "/admin/v2/tenants/fz-bad", body)
    assert status == 400, content


@pytest.mark.parametrize("count", [MAX_PARTITIONS + 1, 2**70])
def test_a_partition_count_over_the_limit_is_refused_at_once(client, count):
    # Found by bench/fuzz.py: 2**70 partitions had the broker create streams until the request timed out.
    body = json.dumps(count).encode()
    status, content = client.call("PUT", "/admin/v2/persistent/fz/ns/huge/partitions", body)
    assert status == 406 and b"less than or equal to" in content, content
    assert client.call("PUT", "/admin/v2/persistent/fz/ns/grown/partitions", b"2")[0] in (204, 409)  # 409: the 2nd case
    assert client.call("POST", "/admin/v2/persistent/fz/ns/grown/partitions", body)[0] == 406
    override = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": count}
    status, content = client.call("POST", "/admin/v2/namespaces/fz/ns/autoTopicCreation", json.dumps(override).encode())
    assert status == 406 and b"less than or equal to" in content, content  # Pulsar's answer over the limit


def test_kafka_partition_counts_over_the_limit_are_invalid_partitions(node):
    admin = KafkaAdmin({"bootstrap.servers": node.bootstrap})
    error = admin.create_topics([NewTopic("k-huge", MAX_PARTITIONS + 1)], operation_timeout=20)["k-huge"].exception(20)
    assert error is not None and error.args[0].code() == KafkaError.INVALID_PARTITIONS
    admin.create_topics([NewTopic("k-grown", 1)], operation_timeout=20)["k-grown"].result(20)
    future = admin.create_partitions([NewPartitions("k-grown", MAX_PARTITIONS + 1)], operation_timeout=20)["k-grown"]
    error = future.exception(20)
    assert error is not None and error.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_cursor_moves_racing_a_subscription_delete_answer_4xx(node, client):
    # Found by bench/fuzz.py: a reset or skip whose subscription a concurrent request deleted
    # answered 500 (CursorFenced escaped the handler).
    assert client.call("PUT", "/admin/v2/persistent/fz/ns/race", b"")[0] in (204, 409)
    sub = "/admin/v2/persistent/fz/ns/race/subscription/s"
    reset = ("POST", sub + "/resetcursor", b'{"ledgerId": 0, "entryId": 0}')
    requests = [("DELETE", sub, b""), reset, ("POST", sub + "/skip_all", b""), reset, reset, reset]
    workers = [AdminClient("127.0.0.1", node.http_port) for _ in requests]
    answers: list[tuple[str, int, bytes]] = []

    def send(worker: AdminClient, request) -> None:
        method, path, body = request
        status, content = worker.call(method, path, body)
        answers.append((path, status, content))

    for _ in range(60):
        status, content = client.call("PUT", sub, b"")
        assert status in (204, 409), content
        threads = [threading.Thread(target=send, args=pair) for pair in zip(workers, requests)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    failed = [a for a in answers if a[1] >= 500]
    assert not failed, failed[:3]
    assert {status for _, status, _ in answers} <= {204, 404, 409}


# Last: random requests may drain the broker or delete what the tests above use.
def test_random_admin_requests_never_fail_with_500(client):
    assert len(ADMIN_ROUTES) > 30

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(admin_requests())
    def run(request):
        check_admin(client, request)

    run()
    assert client.call("GET", "/admin/v2/tenants", b"")[0] == 200
