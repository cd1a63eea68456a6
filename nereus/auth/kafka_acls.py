"""Kafka ACLs (CreateAcls / DescribeAcls / DeleteAcls), kept in the metadata plane.

A binding is Kafka's: resource (type, name, LITERAL or PREFIXED pattern), principal
(``User:<role>``, ``User:*``), host (``*`` or an address), operation, ALLOW or DENY. As in
Kafka's authorizer: a matching DENY wins, then a matching ALLOW; ``ALL`` covers every
operation; READ, WRITE, DELETE and ALTER imply DESCRIBE, ALTER_CONFIGS implies
DESCRIBE_CONFIGS; the literal name ``*`` matches every resource. ``decide`` answers
None when no binding matches, so the caller falls back on the Pulsar grants
(``authorization.py``), the one model both protocols share.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from ..meta import cas

ACLS_KEY = "/nereus/kafka/acls"

# Kafka's enum values (org.apache.kafka.common.resource / acl).
ANY_RESOURCE, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 1, 2, 3, 4, 5
ANY_PATTERN, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
ANY_OP, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 1, 2, 3, 4, 5, 6, 7, 8
DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = 10, 11, 12
ANY_PERMISSION, DENY, ALLOW = 1, 2, 3
_RESOURCE_TYPES = {TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID}
_OPERATIONS = set(range(2, 15))
_IMPLIED = {DESCRIBE: {READ, WRITE, DELETE, ALTER}, DESCRIBE_CONFIGS: {ALTER_CONFIGS}}
WILDCARD = "*"


class InvalidAcl(ValueError):
    """A binding or filter Kafka would refuse (INVALID_REQUEST)."""


@dataclass(frozen=True)
class Binding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


def validate(binding: Binding) -> Binding:
    if binding.resource_type not in _RESOURCE_TYPES:
        raise InvalidAcl(f"invalid resource type {binding.resource_type}")
    if binding.pattern_type not in (LITERAL, PREFIXED):
        raise InvalidAcl("the pattern type must be LITERAL or PREFIXED")
    if not binding.resource_name:
        raise InvalidAcl("the resource name must not be empty")
    if binding.operation not in _OPERATIONS:
        raise InvalidAcl(f"invalid operation {binding.operation}")
    if binding.permission_type not in (ALLOW, DENY):
        raise InvalidAcl("the permission type must be ALLOW or DENY")
    kind, _, name = binding.principal.partition(":")
    if kind != "User" or not name:
        raise InvalidAcl(f"invalid principal {binding.principal!r} (expected User:<name>)")
    if not binding.host:
        raise InvalidAcl("the host must not be empty (* for any)")
    return binding


def filter_matches(binding: Binding, resource_type: int, name: str | None, pattern_type: int,
                   principal: str | None, host: str | None, operation: int, permission_type: int) -> bool:
    """Does ``binding`` match a DescribeAcls / DeleteAcls filter (None and ANY match everything)?"""
    if resource_type != ANY_RESOURCE and binding.resource_type != resource_type:
        return False
    if pattern_type == MATCH:  # bindings that would apply to the resource ``name``
        if name is not None and not _name_matches(binding, name):
            return False
    else:
        if pattern_type != ANY_PATTERN and binding.pattern_type != pattern_type:
            return False
        if name is not None and binding.resource_name != name:
            return False
    return ((principal is None or binding.principal == principal) and (host is None or binding.host == host)
            and (operation == ANY_OP or binding.operation == operation)
            and (permission_type == ANY_PERMISSION or binding.permission_type == permission_type))


def _name_matches(binding: Binding, name: str) -> bool:
    if binding.pattern_type == PREFIXED:
        return name.startswith(binding.resource_name)
    return binding.resource_name in (name, WILDCARD)


def _applies(binding: Binding, resource_type: int, name: str, principal: str, host: str) -> bool:
    return (binding.resource_type == resource_type and _name_matches(binding, name)
            and binding.principal in (principal, "User:*") and binding.host in (host, WILDCARD))


def decide(bindings: list[Binding], role: str | None, host: str, resource_type: int, name: str,
           operation: int) -> bool | None:
    """True: an ALLOW applies; False: a DENY applies; None: no binding says."""
    principal = f"User:{role}" if role is not None else "User:ANONYMOUS"
    relevant = [b for b in bindings if _applies(b, resource_type, name, principal, host)]
    if any(b.permission_type == DENY and b.operation in (operation, ALL) for b in relevant):
        return False
    granting = {operation, ALL} | _IMPLIED.get(operation, set())
    if any(b.permission_type == ALLOW and b.operation in granting for b in relevant):
        return True
    return None


def allows_some(bindings: list[Binding], role: str | None, host: str, resource_type: int, operation: int) -> bool:
    """Does an ALLOW for ``operation`` apply to some resource of the type (Kafka's authorizeByResourceType)?

    A DENY on the wildcard resource (literal ``*`` or the empty prefix) takes every such
    resource away; narrower DENYs leave the rest allowed, as in Kafka.
    """
    principal = f"User:{role}" if role is not None else "User:ANONYMOUS"

    def mine(b: Binding) -> bool:
        return (b.resource_type == resource_type and b.principal in (principal, "User:*")
                and b.host in (host, WILDCARD) and b.operation in (operation, ALL))

    if any(mine(b) and b.permission_type == DENY and (
            (b.pattern_type == LITERAL and b.resource_name == WILDCARD)
            or (b.pattern_type == PREFIXED and b.resource_name == "")) for b in bindings):
        return False
    return any(mine(b) and b.permission_type == ALLOW for b in bindings)


async def load(meta) -> list[Binding]:
    rec = await meta.get(ACLS_KEY)
    return [Binding(**item) for item in json.loads(rec.value)] if rec is not None else []


async def update(meta, change) -> list[Binding]:
    """Compare-and-set the stored bindings to ``change(bindings)``; returns what it returned last."""
    out: list[Binding] = []

    def apply(old: bytes | None) -> bytes:
        nonlocal out
        current = [Binding(**item) for item in json.loads(old)] if old is not None else []
        new, out = change(current)
        return json.dumps([asdict(b) for b in new]).encode()

    await cas.update(meta, ACLS_KEY, apply)
    return out


__all__ = ["ACLS_KEY", "Binding", "InvalidAcl", "allows_some", "decide", "filter_matches", "load", "update", "validate"]
