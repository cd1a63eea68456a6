"""The consumer protocol's embedded messages (JoinGroup metadata, SyncGroup assignments), no I/O.

Both are ``version i16 | body`` with the body in the ``ConsumerProtocolSubscription``
/ ``ConsumerProtocolAssignment`` schemas of that version (newer versions are read
with the newest schema we have, as Kafka reads them).
"""

from __future__ import annotations

import struct

from kio.schema.consumer_protocol_subscription import v0 as sub_v0
from kio.schema.consumer_protocol_subscription import v1 as sub_v1
from kio.schema.consumer_protocol_subscription import v2 as sub_v2
from kio.schema.consumer_protocol_subscription import v3 as sub_v3
from kio.serial import entity_reader

_SUBSCRIPTIONS = {0: sub_v0, 1: sub_v1, 2: sub_v2, 3: sub_v3}


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of a consumer's subscription; None if ``metadata`` is not one."""
    if len(metadata) < 2:
        return None
    version = struct.unpack_from(">h", metadata)[0]
    module = _SUBSCRIPTIONS.get(min(version, 3)) if version >= 0 else None
    if module is None:
        return None
    try:
        body, _ = entity_reader(module.ConsumerProtocolSubscription)(metadata, 2)
    except Exception:  # the native reader raises several types on bad input
        return None
    return frozenset(body.topics)


__all__ = ["subscribed_topics"]
