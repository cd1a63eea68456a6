"""Topic names: Pulsar's scheme is the canonical one (Kafka topics project onto it).

``persistent://tenant/namespace/local`` is a topic; a partition of a partitioned
topic is ``...local-partition-N``; short names ``local`` and ``tenant/ns/local``
expand as Pulsar clients do (``public/default``). Each non-partitioned topic and
each partition is one stream, named by its full topic name.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

PARTITION_SUFFIX = "-partition-"
DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
_PART = re.compile(r"^[A-Za-z0-9_=:.\-]+$")
_PARTITION = re.compile(r"^(.*)-partition-(\d+)$")


class InvalidTopicName(ValueError):
    """The string is not a valid topic name."""


@dataclass(frozen=True, slots=True)
class TopicName:
    domain: str  # "persistent" or "non-persistent"
    tenant: str
    namespace: str
    local: str  # includes the partition suffix for partitions
    # The full name, made once: it keys the broker's maps and labels, which then share one string.
    _full: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_full", f"{self.domain}://{self.tenant}/{self.namespace}/{self.local}")

    @classmethod
    def parse(cls, name: str) -> "TopicName":
        if not name or len(name) > 1024:
            raise InvalidTopicName(f"invalid topic name {name!r}")
        domain = "persistent"
        rest = name
        if "://" in name:
            domain, rest = name.split("://", 1)
            if domain not in ("persistent", "non-persistent"):
                raise InvalidTopicName(f"invalid topic domain in {name!r}")
        parts = rest.split("/")
        if len(parts) == 1:
            if "://" in name:
                raise InvalidTopicName(f"topic {name!r} needs tenant/namespace/topic")
            tenant, namespace, local = DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]
        elif len(parts) == 3:
            tenant, namespace, local = parts
        else:
            raise InvalidTopicName(f"invalid topic name {name!r}: expected tenant/namespace/topic")
        for part in (tenant, namespace):
            if not _PART.match(part):
                raise InvalidTopicName(f"invalid tenant or namespace in {name!r}")
        if not local or "\x00" in local or "/" in local:
            raise InvalidTopicName(f"invalid local topic name in {name!r}")
        # Interned: a broker holds many names of few tenants and namespaces.
        return cls(sys.intern(domain), sys.intern(tenant), sys.intern(namespace), local)

    def __str__(self) -> str:
        return self._full

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def partition_index(self) -> int:
        """The partition number, or -1 for a topic that is not a partition."""
        m = _PARTITION.match(self.local)
        return int(m.group(2)) if m else -1

    @property
    def base(self) -> "TopicName":
        """The partitioned topic this partition belongs to (itself if not a partition)."""
        m = _PARTITION.match(self.local)
        return TopicName(self.domain, self.tenant, self.namespace, m.group(1)) if m else self

    def partition(self, index: int) -> "TopicName":
        return TopicName(self.domain, self.tenant, self.namespace, f"{self.local}{PARTITION_SUFFIX}{index}")
