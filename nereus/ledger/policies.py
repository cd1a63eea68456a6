"""Tenants and policies in the metadata plane: their keys (written by the admin API; read by
the topic layer, authorization and both protocols).

- Tenants: ``/nereus/pulsar/tenants/{tenant}`` (admin roles, allowed clusters).
- Namespace policies: ``/nereus/pulsar/namespaces/{tenant}/{namespace}``, Pulsar's ``Policies`` subset.
- Topic policies: ``/nereus/pulsar/topic-policies/{tenant}/{namespace}/{topic}``, Pulsar's ``TopicPolicies``
  subset; set on a partitioned topic's name they apply to each of its partitions, and they
  override the namespace's.
"""

from __future__ import annotations

import json
from urllib.parse import quote

from ..meta import EXPECT_ABSENT, UnexpectedVersion

TENANTS_ROOT = "/nereus/pulsar/tenants"
POLICIES_ROOT = "/nereus/pulsar/namespaces"
TOPIC_POLICIES_ROOT = "/nereus/pulsar/topic-policies"


def tenant_key(tenant: str) -> str:
    return f"{TENANTS_ROOT}/{tenant}"


async def ensure_default_namespace(meta, cluster: str = "standalone") -> None:
    """Create ``public`` and ``public/default`` if absent, as a Pulsar standalone does."""
    for key, value in ((tenant_key("public"), {"adminRoles": [], "allowedClusters": [cluster]}),
                       (policies_key("public", "default"), {})):
        try:
            await meta.put(key, json.dumps(value).encode(), expected_version_id=EXPECT_ABSENT)
        except UnexpectedVersion:
            pass


def policies_key(tenant: str, namespace: str) -> str:
    return f"{POLICIES_ROOT}/{tenant}/{namespace}"


def topic_policies_prefix(tenant: str, namespace: str) -> str:
    """The parent of a namespace's topic policy records."""
    return f"{TOPIC_POLICIES_ROOT}/{tenant}/{namespace}"


def topic_policies_key(tenant: str, namespace: str, local: str) -> str:
    """The record of topic ``local`` (a partitioned topic's base name for its partitions)."""
    return f"{topic_policies_prefix(tenant, namespace)}/{quote(local, safe='')}"


__all__ = ["POLICIES_ROOT", "TENANTS_ROOT", "TOPIC_POLICIES_ROOT", "ensure_default_namespace", "policies_key",
           "tenant_key", "topic_policies_key", "topic_policies_prefix"]
