"""Authorization: which role may produce, consume or administer, as Pulsar's default provider decides.

- Superusers (``superUserRoles``) may do everything.
- A tenant's admins (its ``adminRoles``) may do everything in the tenant's namespaces and topics.
- With ``authorizationAllowWildcardsMatching`` a grant to ``prefix*`` or ``*suffix`` holds for every
  role so named.
- Other roles get what the namespace policies grant: ``auth_policies.namespace_auth[role]``
  (every topic of the namespace) and ``auth_policies.destination_auth[topic][role]`` (one topic;
  a partition inherits its partitioned topic's grants). Lookup needs produce or consume.

Permissions are read from the metadata plane on every check, so a grant or a revoke
applies to live connections at their next operation.
"""

from __future__ import annotations

import json
import logging

from ..ledger.naming import TopicName
from ..ledger.policies import policies_key, tenant_key
from . import kafka_acls
from .kafka_acls import CREATE, DESCRIBE, GROUP, READ, TOPIC, WRITE

log = logging.getLogger(__name__)

PRODUCE, CONSUME = "produce", "consume"
#: Where Kafka topics live (Kafka topic ``t`` is ``persistent://public/default/t``).
KAFKA_TENANT, KAFKA_NAMESPACE = "public", "default"
_KAFKA_NEEDS = {WRITE: {PRODUCE}, CREATE: {PRODUCE}, READ: {CONSUME}, DESCRIBE: {PRODUCE, CONSUME}}
#: Pulsar's AuthAction values.
ACTIONS = (PRODUCE, CONSUME, "functions", "sources", "sinks", "packages")
AUTH_FIELD = "auth_policies"


class InvalidActions(ValueError):
    """A permission body that is not a list of Pulsar's actions."""


def validate_actions(value) -> list[str]:
    """The actions of a grant body (a JSON list of action names), sorted and without duplicates."""
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise InvalidActions("the permissions must be a JSON list of actions")
    unknown = [a for a in value if a not in ACTIONS]
    if unknown:
        raise InvalidActions(f"unknown action(s) {', '.join(unknown)} (one of {', '.join(ACTIONS)})")
    return sorted(set(value))


def empty_auth_policies() -> dict:
    return {"namespace_auth": {}, "destination_auth": {}, "subscription_auth_roles": {}}


def auth_policies(stored: dict) -> dict:
    """The namespace record's ``auth_policies`` in Pulsar's shape (empty maps when none were granted)."""
    found = stored.get(AUTH_FIELD) or {}
    out = empty_auth_policies()
    for name in out:
        out[name] = found.get(name) or {}
    return out


def base_topic(topic: TopicName) -> str:
    """The name topic-level grants are kept under: a partition's partitioned topic."""
    return str(topic.base) if topic.partition_index >= 0 else str(topic)


class Authorizer:
    """Answers whether a role may act, from ``superUserRoles`` and the metadata plane's records."""

    def __init__(self, meta, super_user_roles: tuple[str, ...] = (), wildcards: bool = False) -> None:
        self.meta = meta
        self.super_users = frozenset(super_user_roles)
        self.wildcards = wildcards  # authorizationAllowWildcardsMatching

    def granted(self, grants: dict, role: str | None) -> set[str]:
        """The actions ``grants`` ({role: [actions]}) give ``role``; with wildcard matching a granted
        ``prefix*`` or ``*suffix`` counts for every role starting or ending so (only at one end, as Pulsar)."""
        if role is None:
            return set()
        out = set(grants.get(role) or ())
        if self.wildcards:
            for granted_role, actions in grants.items():
                if (len(granted_role) > 1 and granted_role.endswith("*") and role.startswith(granted_role[:-1])) \
                        or (len(granted_role) > 1 and granted_role.startswith("*") and role.endswith(granted_role[1:])):
                    out.update(actions or ())
        return out

    def is_super_user(self, role: str | None) -> bool:
        return role is not None and role in self.super_users

    async def _record(self, key: str) -> dict | None:
        rec = await self.meta.get(key)
        if rec is None:
            return None
        try:
            value = json.loads(rec.value)
        except ValueError:
            log.warning("unreadable record %s: no permission read from it", key)
            return None
        return value if isinstance(value, dict) else None

    async def is_tenant_admin(self, role: str | None, tenant: str) -> bool:
        """Superuser, or one of the tenant's ``adminRoles``."""
        if role is None:
            return False
        if self.is_super_user(role):
            return True
        info = await self._record(tenant_key(tenant)) or {}
        return role in (info.get("adminRoles") or ())

    async def actions(self, role: str | None, topic: TopicName) -> set[str]:
        """What ``role`` was granted on ``topic`` (namespace and topic grants together)."""
        if role is None:
            return set()
        stored = await self._record(policies_key(topic.tenant, topic.namespace)) or {}
        auth = auth_policies(stored)
        granted = self.granted(auth["namespace_auth"], role)
        granted.update(self.granted(auth["destination_auth"].get(base_topic(topic)) or {}, role))
        if (topic.tenant, topic.namespace) == (KAFKA_TENANT, KAFKA_NAMESPACE):  # Kafka's ACLs on its topics
            bindings = await kafka_acls.load(self.meta)
            name = topic.base.local if topic.partition_index >= 0 else topic.local
            for operation, action in ((WRITE, PRODUCE), (READ, CONSUME)):
                said = kafka_acls.decide(bindings, role, "", TOPIC, name, operation)
                if said is True:
                    granted.add(action)
                elif said is False:
                    granted.discard(action)
        return granted

    async def kafka_allowed(self, role: str | None, host: str, resource_type: int, name: str,
                            operation: int) -> bool:
        """May the Kafka principal ``User:role`` (from ``host``) do ``operation`` on the resource?

        Kafka's ACLs decide when one matches; otherwise the Pulsar grants on the Kafka
        namespace: TOPIC WRITE needs produce, READ consume, DESCRIBE either; a GROUP is
        readable by roles that may consume from the namespace.
        """
        if await self.is_tenant_admin(role, KAFKA_TENANT):
            return True
        said = kafka_acls.decide(await kafka_acls.load(self.meta), role, host, resource_type, name, operation)
        if said is not None:
            return said
        if role is None:
            return False
        if resource_type == TOPIC and operation in _KAFKA_NEEDS:
            topic = TopicName("persistent", KAFKA_TENANT, KAFKA_NAMESPACE, name)
            return bool(await self.actions(role, topic) & _KAFKA_NEEDS[operation])
        if resource_type == GROUP and operation in (READ, DESCRIBE):
            stored = await self._record(policies_key(KAFKA_TENANT, KAFKA_NAMESPACE)) or {}
            return CONSUME in self.granted(auth_policies(stored)["namespace_auth"], role)
        return False

    async def kafka_writes_some_topic(self, role: str | None, host: str) -> bool:
        """May the principal write to at least one Kafka topic (an ACL or a Pulsar produce grant)?"""
        if await self.is_tenant_admin(role, KAFKA_TENANT):
            return True
        if kafka_acls.allows_some(await kafka_acls.load(self.meta), role, host, TOPIC, WRITE):
            return True
        if role is None:
            return False
        auth = auth_policies(await self._record(policies_key(KAFKA_TENANT, KAFKA_NAMESPACE)) or {})
        return PRODUCE in self.granted(auth["namespace_auth"], role) or any(
            PRODUCE in self.granted(grants, role) for grants in auth["destination_auth"].values())

    async def allowed(self, role: str | None, topic: TopicName, action: str | None) -> bool:
        """May ``role`` do ``action`` on ``topic``? ``action`` None: lookup (produce or consume)."""
        if await self.is_tenant_admin(role, topic.tenant):
            return True
        granted = await self.actions(role, topic)
        return bool(granted & {PRODUCE, CONSUME}) if action is None else action in granted

    async def may_list(self, role: str | None, tenant: str, namespace: str) -> bool:
        """May ``role`` list the namespace's topics (tenant admin, or produce/consume granted on the namespace)?"""
        if await self.is_tenant_admin(role, tenant):
            return True
        stored = await self._record(policies_key(tenant, namespace)) or {}
        return bool(self.granted(auth_policies(stored)["namespace_auth"], role) & {PRODUCE, CONSUME})

    async def subscription_allowed(self, role: str | None, topic: TopicName, subscription: str) -> bool:
        """Once the namespace lists roles for a subscription name, only they (and admins) may use it."""
        if await self.is_tenant_admin(role, topic.tenant):
            return True
        stored = await self._record(policies_key(topic.tenant, topic.namespace)) or {}
        roles = auth_policies(stored)["subscription_auth_roles"].get(subscription) or ()
        return not roles or (role is not None and role in roles)

    async def denial(self, role: str | None, topic: TopicName, action: str | None,
                     subscription: str | None = None) -> str | None:
        """None if allowed, else the message the client gets (Pulsar's wording)."""
        if subscription and not await self.subscription_allowed(role, topic, subscription):
            log.info("role %s refused: subscription %s on %s", role, subscription, topic)
            return f"Client with role {role} is not authorized to consume from topic {topic} " \
                   f"with subscription {subscription}"
        if await self.allowed(role, topic, action):
            return None
        what = {PRODUCE: "produce to", CONSUME: "consume from"}.get(action, "lookup")
        log.info("role %s refused: %s %s", role, what, topic)
        return f"Client with role {role} is not authorized to {what} topic {topic}"


__all__ = ["ACTIONS", "AUTH_FIELD", "Authorizer", "CONSUME", "InvalidActions", "PRODUCE", "auth_policies",
           "base_topic", "empty_auth_policies", "validate_actions"]
