"""The protocol-neutral topic layer: between the protocols and storage.

Loading and unloading topics, ownership of each stream's append session,
deduplication, namespace policies and partitioned-topic metadata live here. The
Pulsar and Kafka listeners, the admin API and the lakehouse writers use it; none
of them reaches into another protocol's internals.
"""

from .partitioned import (PARTITIONED_ROOT, create_partitioned_topic, list_partitioned_topics, partitioned_key,
                          partitions_of)
from .placement import BrokerAddress, NotOwner, Placement, UnknownListener
from .registry import TopicRegistry
from .topic import Topic, TopicUnloaded

__all__ = ["PARTITIONED_ROOT", "BrokerAddress", "NotOwner", "Placement", "Topic", "TopicRegistry", "TopicUnloaded", "UnknownListener", "create_partitioned_topic",
           "list_partitioned_topics", "partitioned_key", "partitions_of"]
