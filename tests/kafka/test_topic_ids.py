"""Topics named by id in Metadata (v10+): found by id, and UNKNOWN_TOPIC_ID for an id no topic has."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequestTopic

from .raw import RawKafka


def _by_id(raw: RawKafka, topic_id: uuid.UUID, version: int = 12):
    request_topic = MetadataRequestTopic(name=None, topic_id=topic_id)
    extra = {"include_cluster_authorized_operations": False} if version < 11 else {}
    response = raw.request(3, version, topics=(request_topic,), allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False, **extra)
    (answer,) = response.topics
    return answer


def test_a_topic_is_found_by_its_id_and_an_unknown_id_is_named_as_such(broker, topic):
    raw = RawKafka(broker.bootstrap)
    try:
        (created,) = raw.metadata([topic], version=12).topics
        assert created.error_code == ErrorCode.none and created.topic_id != uuid.UUID(int=0)
        found = _by_id(raw, created.topic_id)
        assert (found.error_code, found.name, found.topic_id) == (ErrorCode.none, topic, created.topic_id)
        assert len(found.partitions) == len(created.partitions)
        missing_id = uuid.uuid4()
        missing = _by_id(raw, missing_id)
        assert (missing.error_code, missing.name, missing.topic_id) == (ErrorCode.unknown_topic_id, None, missing_id)
        again = _by_id(raw, created.topic_id)  # the name remembered for the id is still right
        assert again.name == topic
    finally:
        raw.close()


def test_before_v12_an_unknown_id_answers_with_an_empty_name(broker):
    raw = RawKafka(broker.bootstrap)
    try:
        missing = _by_id(raw, uuid.uuid4(), version=10)
        assert (missing.error_code, missing.name) == (ErrorCode.unknown_topic_id, "")
    finally:
        raw.close()
