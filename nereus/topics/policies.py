"""Policies in the metadata plane (written by the admin API).

- Namespace policies: ``/nereus/pulsar/namespaces/{tenant}/{namespace}``, Pulsar's ``Policies`` subset.
- Topic policies: ``/nereus/pulsar/topic-policies/{tenant}/{namespace}/{topic}``, Pulsar's ``TopicPolicies``
  subset; set on a partitioned topic's name they apply to each of its partitions, and they
  override the namespace's.
"""

from __future__ import annotations

from urllib.parse import quote

POLICIES_ROOT = "/nereus/pulsar/namespaces"
TOPIC_POLICIES_ROOT = "/nereus/pulsar/topic-policies"


def policies_key(tenant: str, namespace: str) -> str:
    return f"{POLICIES_ROOT}/{tenant}/{namespace}"


def topic_policies_prefix(tenant: str, namespace: str) -> str:
    """The parent of a namespace's topic policy records."""
    return f"{TOPIC_POLICIES_ROOT}/{tenant}/{namespace}"


def topic_policies_key(tenant: str, namespace: str, local: str) -> str:
    """The record of topic ``local`` (a partitioned topic's base name for its partitions)."""
    return f"{topic_policies_prefix(tenant, namespace)}/{quote(local, safe='')}"


__all__ = ["POLICIES_ROOT", "TOPIC_POLICIES_ROOT", "policies_key", "topic_policies_key", "topic_policies_prefix"]
