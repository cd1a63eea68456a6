"""Topic auto-creation: the broker's ``allowAutoTopicCreation`` settings and a namespace's override.

A topic is created on first use only inside an existing namespace, and only when the
rule in force allows it: the namespace policy ``autoTopicCreationOverride`` when set,
else the broker's settings (``allowAutoTopicCreation``, ``allowAutoTopicCreationType``,
``defaultNumPartitions``), as Pulsar decides it. Sans-io apart from ``namespace_policies``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .partitioned import MAX_PARTITIONS
from ..ledger.policies import policies_key

NON_PARTITIONED = "non-partitioned"
PARTITIONED = "partitioned"
OVERRIDE_FIELD = "autoTopicCreationOverride"


class InvalidAutoCreation(ValueError):
    """An ``autoTopicCreationOverride`` document that Pulsar would refuse."""


class PartitionsOverLimit(InvalidAutoCreation):
    """A ``defaultNumPartitions`` above ``maxNumPartitionsPerPartitionedTopic`` (Pulsar answers 406)."""


@dataclass(frozen=True)
class AutoCreation:
    """Whether a missing topic is created on first use, and how."""

    allowed: bool = True
    topic_type: str = NON_PARTITIONED
    partitions: int = 1

    @property
    def partitioned(self) -> bool:
        return self.topic_type == PARTITIONED

    def to_json(self) -> dict:
        doc = {"allowAutoTopicCreation": self.allowed, "topicType": self.topic_type}
        if self.partitioned:
            doc["defaultNumPartitions"] = self.partitions
        return doc


def validate_override(value, max_partitions: int = MAX_PARTITIONS) -> dict:
    """The stored form of a namespace's ``autoTopicCreationOverride`` (Pulsar's JSON shape)."""
    if not isinstance(value, dict) or not isinstance(value.get("allowAutoTopicCreation"), bool):
        raise InvalidAutoCreation("allowAutoTopicCreation (true or false) is required")
    topic_type = value.get("topicType", NON_PARTITIONED)
    if topic_type not in (NON_PARTITIONED, PARTITIONED):
        raise InvalidAutoCreation(f"topicType must be {NON_PARTITIONED} or {PARTITIONED}, not {topic_type!r}")
    doc = {"allowAutoTopicCreation": value["allowAutoTopicCreation"], "topicType": topic_type}
    partitions = value.get("defaultNumPartitions")
    if topic_type == PARTITIONED and value["allowAutoTopicCreation"]:
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise InvalidAutoCreation("defaultNumPartitions must be a positive integer for partitioned topics")
    if partitions is not None:
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise InvalidAutoCreation("defaultNumPartitions must be a positive integer")
        if partitions > max_partitions:
            raise PartitionsOverLimit(f"Number of partitions should be less than or equal to {max_partitions}")
        doc["defaultNumPartitions"] = partitions
    return doc


def in_force(broker: AutoCreation, policies: dict) -> AutoCreation:
    """The rule for a namespace whose policies are ``policies``: its override, else the broker's."""
    override = policies.get(OVERRIDE_FIELD)
    if not isinstance(override, dict):
        return broker
    topic_type = override.get("topicType", NON_PARTITIONED)
    partitions = override.get("defaultNumPartitions") or broker.partitions
    return AutoCreation(bool(override.get("allowAutoTopicCreation")), topic_type, partitions)


async def namespace_policies(meta, tenant: str, namespace: str) -> dict | None:
    """The stored policies of ``tenant/namespace``, None when the namespace does not exist."""
    rec = await meta.get(policies_key(tenant, namespace))
    if rec is None:
        return None
    value = json.loads(rec.value)
    return value if isinstance(value, dict) else {}


__all__ = ["NON_PARTITIONED", "OVERRIDE_FIELD", "PARTITIONED", "AutoCreation", "InvalidAutoCreation",
           "PartitionsOverLimit", "in_force", "namespace_policies", "validate_override"]
