"""Kafka client quotas in the metadata plane, and which one applies to a client.

One record per quota entity under ``/nereus/kafka/client-quotas/`` (the entity's
``type=name`` parts, sorted, percent-quoted; ``<default>`` for a default entity):
``{"entity": {type: name or null}, "quotas": {key: value}}``, changed by
compare-and-set (AlterClientQuotas on any broker). Each broker keeps a copy,
read again at most ``REFRESH_SECONDS`` after its last read (at once after an
alteration through it), so a change made through another broker applies within
that time.
"""

from __future__ import annotations

import json
import time
from urllib.parse import quote

from ....meta import MetadataStore
from ....meta.cas import update
from ....tasks import spawn

PREFIX = "/nereus/kafka/client-quotas/"
_PARTITION = "kafka-client-quotas"  # one shard holds them all: Describe is one scan
REFRESH_SECONDS = 5.0
USER, CLIENT_ID, IP = "user", "client-id", "ip"
#: Quota keys each entity type takes (Kafka's QuotaConfigs).
KEYS = {
    USER: {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"},
    CLIENT_ID: {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"},
    IP: {"connection_creation_rate"},
}
#: The unauthenticated user's name in user quotas (Kafka's ANONYMOUS principal).
ANONYMOUS = "ANONYMOUS"

Entity = tuple[tuple[str, str | None], ...]  # ((type, name or None = default), ...), sorted by type


def entity_key(entity: Entity) -> str:
    return PREFIX + quote("/".join(f"{t}={'<default>' if n is None else quote(n, safe='')}" for t, n in entity),
                          safe="")


class QuotaStore:
    """Reads and changes the stored quotas; answers which quota a (user, client id) has."""

    def __init__(self, meta: MetadataStore, clock=time.monotonic) -> None:
        self.meta = meta
        self._clock = clock
        self.entries: dict[Entity, dict[str, float]] = {}
        self._read_at: float | None = None
        self._reading = None

    async def load(self) -> dict[Entity, dict[str, float]]:
        entries = {}
        async for rec in self.meta.range_scan(PREFIX, PREFIX + "\xff", partition_key=_PARTITION):
            value = json.loads(rec.value)
            if value.get("quotas"):
                entries[tuple(sorted((t, n) for t, n in value["entity"].items()))] = value["quotas"]
        self.entries, self._read_at = entries, self._clock()
        return entries

    @property
    def loaded(self) -> bool:
        return self._read_at is not None

    async def current(self) -> dict[Entity, dict[str, float]]:
        """The copy, read first if never read, refreshed in the background once stale."""
        if self._read_at is None:
            return await self.load()
        self.refresh_if_stale()
        return self.entries

    async def alter(self, entity: Entity, ops: list[tuple[str, float | None]]) -> None:
        """Set (value) or remove (None) quota keys of ``entity`` (a record left without any is ignored)."""
        def change(old: bytes | None) -> bytes | None:
            quotas = json.loads(old)["quotas"] if old else {}
            for key, value in ops:
                if value is None:
                    quotas.pop(key, None)
                else:
                    quotas[key] = value
            return json.dumps({"entity": dict(entity), "quotas": quotas}, sort_keys=True).encode()

        await update(self.meta, entity_key(entity), change, partition_key=_PARTITION)
        await self.load()

    def quota(self, key: str, user: str | None, client_id: str | None) -> float | None:
        """The ``key`` quota of a client, by Kafka's precedence (most specific user and client id
        pair first, then user defaults, then client-id quotas); None: unlimited."""
        if not self.entries:  # no quota anywhere (the usual case): asked on every request
            return None
        user = user or ANONYMOUS
        client_id = client_id or ""
        for entity in ((("client-id", client_id), ("user", user)), (("client-id", None), ("user", user)),
                       (("user", user),), (("client-id", client_id), ("user", None)),
                       (("client-id", None), ("user", None)), (("user", None),),
                       (("client-id", client_id),), (("client-id", None),)):
            value = self.entries.get(entity, {}).get(key)
            if value is not None:
                return value
        return None

    def ip_quota(self, ip: str) -> float | None:
        """The ``connection_creation_rate`` of connections from ``ip`` (its own, else the default)."""
        for entity in (((IP, ip),), ((IP, None),)):
            value = self.entries.get(entity, {}).get("connection_creation_rate")
            if value is not None:
                return value
        return None

    def refresh_if_stale(self) -> None:
        """Read the quotas again in the background when the copy is stale (or was never read)."""
        if (self._read_at is None or self._clock() - self._read_at > REFRESH_SECONDS) \
                and (self._reading is None or self._reading.done()):
            self._reading = spawn(self.load(), "kafka client quotas refresh")


__all__ = ["ANONYMOUS", "CLIENT_ID", "IP", "KEYS", "QuotaStore", "USER", "entity_key"]
