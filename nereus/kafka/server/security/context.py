"""What the security room's handlers are given: where ACLs, quotas and SCRAM credentials are kept."""

from __future__ import annotations

from dataclasses import dataclass

from ....meta import MetadataStore
from .quota_store import QuotaStore
from .scram_store import ScramStore


@dataclass(frozen=True, slots=True)
class SecurityContext:
    """The ACLs' metadata plane, the client quotas and the SCRAM credentials of one broker."""

    meta: MetadataStore
    quotas: QuotaStore
    scram: ScramStore


__all__ = ["SecurityContext"]
