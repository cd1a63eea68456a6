"""Tenants and policies in the metadata plane: their keys (written by the admin API; read by
the topic layer, authorization and both protocols).

- Tenants: ``/nereus/pulsar/tenants/{tenant}`` (admin roles, allowed clusters).
- Namespace policies: ``/nereus/pulsar/namespaces/{tenant}/{namespace}``, Pulsar's ``Policies`` subset.
- Topic policies: ``/nereus/pulsar/topic-policies/{tenant}/{namespace}/{topic}``, Pulsar's ``TopicPolicies``
  subset; set on a partitioned topic's name they apply to each of its partitions, and they
  override the namespace's.

The ``public`` tenant and ``public/default`` that a broker creates on its own are a convenience,
not an operator's choice: until they are changed, an explicit creation of either replaces them
(``replace_untouched_default``) rather than answering "already exists". Set-up scripts written
for Pulsar (its client libraries' test services, for one) create them with their own admin roles
and permissions; against a Pulsar standalone they usually run before its defaults are made.
Each default's marker (``/nereus/pulsar/standalone-defaults/...``) holds the version the broker
wrote; any later write of the record changes the version, and the marker then means nothing.
"""

from __future__ import annotations

import contextlib
import json
from urllib.parse import quote

from ..meta import EXPECT_ABSENT, UnexpectedVersion

TENANTS_ROOT = "/nereus/pulsar/tenants"
POLICIES_ROOT = "/nereus/pulsar/namespaces"
TOPIC_POLICIES_ROOT = "/nereus/pulsar/topic-policies"
DEFAULTS_ROOT = "/nereus/pulsar/standalone-defaults"


def tenant_key(tenant: str) -> str:
    return f"{TENANTS_ROOT}/{tenant}"


async def ensure_default_namespace(meta, cluster: str = "standalone") -> None:
    """Create ``public`` and ``public/default`` if absent, as a Pulsar standalone does."""
    for key, value in ((tenant_key("public"), {"adminRoles": [], "allowedClusters": [cluster]}),
                       (policies_key("public", "default"), {})):
        try:
            created = await meta.put(key, json.dumps(value).encode(), expected_version_id=EXPECT_ABSENT)
        except UnexpectedVersion:
            continue
        await meta.put(_default_marker(key), str(created.version.version_id).encode())


def _default_marker(key: str) -> str:
    return DEFAULTS_ROOT + key[len("/nereus/pulsar"):]


async def replace_untouched_default(meta, key: str, value: bytes) -> bool:
    """Put ``value`` at ``key`` if it is a default the broker made and nobody changed since.

    False when ``key`` is not such a default (then it was created or changed by someone).
    """
    marker = await meta.get(_default_marker(key))
    if marker is None:
        return False
    current = await meta.get(key)
    if current is None or str(current.version.version_id).encode() != marker.value:
        return False
    try:
        await meta.put(key, value, expected_version_id=current.version.version_id)
    except UnexpectedVersion:
        return False  # changed meanwhile: that change is the operator's
    with contextlib.suppress(UnexpectedVersion):
        await meta.delete(_default_marker(key), expected_version_id=marker.version.version_id)
    return True


def policies_key(tenant: str, namespace: str) -> str:
    return f"{POLICIES_ROOT}/{tenant}/{namespace}"


def topic_policies_prefix(tenant: str, namespace: str) -> str:
    """The parent of a namespace's topic policy records."""
    return f"{TOPIC_POLICIES_ROOT}/{tenant}/{namespace}"


def topic_policies_key(tenant: str, namespace: str, local: str) -> str:
    """The record of topic ``local`` (a partitioned topic's base name for its partitions)."""
    return f"{topic_policies_prefix(tenant, namespace)}/{quote(local, safe='')}"


__all__ = ["DEFAULTS_ROOT", "POLICIES_ROOT", "TENANTS_ROOT", "TOPIC_POLICIES_ROOT", "ensure_default_namespace",
           "policies_key", "replace_untouched_default", "tenant_key", "topic_policies_key", "topic_policies_prefix"]
