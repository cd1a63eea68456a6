"""A classic group's states, error codes and members, as its record keeps them.

The group record ``/nereus/kafka/groups/{group}`` (``group_key``) holds the state,
generation, protocol, leader and members (``Member.to_json``) of a classic group,
and the KIP-848 protocol's state of a consumer group (``consumer_group.py``).
"""

from __future__ import annotations

import asyncio
import base64
from dataclasses import dataclass, field
from urllib.parse import quote

from ....codec.kafka.consumer_protocol import subscribed_topics

GROUPS_ROOT = "/nereus/kafka/groups/"
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"
INITIAL_REBALANCE_DELAY = 0.3  # lets consumers started together land in one generation

# Kafka error codes used here
NONE, ILLEGAL_GENERATION, INCONSISTENT_PROTOCOL, UNKNOWN_MEMBER = 0, 22, 23, 25
INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS, NOT_COORDINATOR = 26, 27, 16
COORDINATOR_NOT_AVAILABLE, GROUP_MAX_SIZE_REACHED, FENCED_INSTANCE_ID = 15, 81, 82
GROUP_ID_NOT_FOUND, STALE_MEMBER_EPOCH, UNSUPPORTED_VERSION = 69, 113, 35
NON_EMPTY_GROUP, GROUP_SUBSCRIBED_TO_TOPIC = 68, 86
CONSUMER_SESSION_TIMEOUT = 45.0  # Kafka's group.consumer.session.timeout.ms default


class GroupLost(Exception):
    """Another broker wrote the group since this one last read or wrote it."""


class GroupError(Exception):
    """A group request refused with a Kafka error code."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: float
    rebalance_timeout: float
    protocols: list[tuple[str, bytes]]
    instance_id: str | None = None
    assignment: bytes = b""
    last_seen: float = 0.0
    join: asyncio.Future | None = None
    sync: asyncio.Future | None = None

    def metadata_for(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def to_json(self) -> dict:
        return {"id": self.member_id, "client": self.client_id, "host": self.client_host,
                "session": self.session_timeout, "rebalance": self.rebalance_timeout, "instance": self.instance_id,
                "protocols": [[n, base64.b64encode(m).decode()] for n, m in self.protocols],
                "assignment": base64.b64encode(self.assignment).decode()}

    @classmethod
    def from_json(cls, v: dict) -> "Member":
        return cls(v["id"], v["client"], v["host"], v["session"], v["rebalance"],
                   [(n, base64.b64decode(m)) for n, m in v["protocols"]], v.get("instance"),
                   base64.b64decode(v["assignment"]))


@dataclass
class JoinResult:
    error: int
    generation: int = -1
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)
    skip_assignment: bool = False


def same_subscription(new: bytes, old: bytes) -> bool:
    """Same topics subscribed (owned partitions and user data may differ after a restart)."""
    topics = subscribed_topics(new)
    return new == old or (topics is not None and topics == subscribed_topics(old))


def group_key(group_id: str) -> str:
    return GROUPS_ROOT + quote(group_id, safe="")


__all__ = ["COMPLETING", "CONSUMER_SESSION_TIMEOUT", "COORDINATOR_NOT_AVAILABLE", "DEAD", "EMPTY",
           "FENCED_INSTANCE_ID", "GROUPS_ROOT", "GROUP_ID_NOT_FOUND", "GROUP_MAX_SIZE_REACHED", "GROUP_SUBSCRIBED_TO_TOPIC", "GroupError", "GroupLost",
           "ILLEGAL_GENERATION", "INCONSISTENT_PROTOCOL", "INITIAL_REBALANCE_DELAY", "INVALID_SESSION_TIMEOUT", "NON_EMPTY_GROUP",
           "JoinResult", "Member", "NONE", "NOT_COORDINATOR", "PREPARING", "REBALANCE_IN_PROGRESS", "STABLE",
           "STALE_MEMBER_EPOCH", "UNKNOWN_MEMBER", "UNSUPPORTED_VERSION", "group_key", "same_subscription"]
