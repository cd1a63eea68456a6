"""SCRAM credentials in the metadata plane: one record per user, one entry per mechanism.

``/nereus/kafka/scram-users/{user}`` (the name percent-quoted) holds
``{mechanism: {salt, iterations, stored_key, server_key}}``; every change is a
compare-and-set, so brokers and the ``nereus kafka-user`` command may write at once.
"""

from __future__ import annotations

import json
from urllib.parse import quote, unquote

from ....meta import MetadataStore
from ....meta.cas import update
from .scram import ScramCredential

PREFIX = "/nereus/kafka/scram-users/"
_PARTITION = "kafka-scram-users"  # one shard holds them all: Describe of every user is one scan


def _key(user: str) -> str:
    return PREFIX + quote(user, safe="")


class ScramStore:
    """Read and change the SCRAM credentials of Kafka users."""

    def __init__(self, meta: MetadataStore) -> None:
        self.meta = meta

    async def get(self, user: str) -> dict[str, ScramCredential]:
        """``{mechanism: credential}`` of ``user`` (empty: no such user)."""
        rec = await self.meta.get(_key(user), partition_key=_PARTITION)
        if rec is None:
            return {}
        return {mech: ScramCredential.from_json(obj) for mech, obj in json.loads(rec.value).items()}

    async def users(self) -> dict[str, dict[str, ScramCredential]]:
        out = {}
        async for rec in self.meta.range_scan(PREFIX, PREFIX + "\xff", partition_key=_PARTITION):
            creds = json.loads(rec.value)
            if creds:
                out[unquote(rec.key[len(PREFIX):])] = {m: ScramCredential.from_json(o) for m, o in creds.items()}
        return out

    async def set(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        def upsert(old: bytes | None) -> bytes:
            creds = json.loads(old) if old else {}
            creds[mechanism] = credential.to_json()
            return json.dumps(creds, sort_keys=True).encode()

        await update(self.meta, _key(user), upsert, partition_key=_PARTITION)

    async def delete(self, user: str, mechanism: str) -> bool:
        """Remove one mechanism's credential; False when there was none."""
        found = False

        def remove(old: bytes | None) -> bytes | None:
            nonlocal found
            creds = json.loads(old) if old else {}
            found = mechanism in creds
            if not found:
                return None
            del creds[mechanism]
            return json.dumps(creds, sort_keys=True).encode()

        await update(self.meta, _key(user), remove, partition_key=_PARTITION)
        return found


__all__ = ["PREFIX", "ScramStore"]
