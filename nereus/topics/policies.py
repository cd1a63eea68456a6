"""Namespace policies in the metadata plane: ``/nereus/pulsar/namespaces/{tenant}/{namespace}``."""

from __future__ import annotations

POLICIES_ROOT = "/nereus/pulsar/namespaces"  # written by the admin API


def policies_key(tenant: str, namespace: str) -> str:
    return f"{POLICIES_ROOT}/{tenant}/{namespace}"


__all__ = ["POLICIES_ROOT", "policies_key"]
