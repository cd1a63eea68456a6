"""Which topics a Pulsar client may use: tenants and namespaces enforced, auto-creation as configured.

A lookup, PRODUCER or SUBSCRIBE on a topic of a missing tenant or namespace, or on
a missing topic that the rule in force (``topics.autocreate``) does not let this
broker create, is answered ``TopicNotFound``, as Pulsar answers it. A missing tenant
or namespace is answered so before any permission is checked (``require_namespace``),
so a client learns that the name is wrong rather than that it may not use it. A
non-persistent topic that is not partitioned exists as soon as its namespace does.
"""

from __future__ import annotations

from ...ledger.naming import TopicName
from ...storage import StreamNotFound
from ...topics import NotOwner, create_partitioned_topic, partitions_of
from ...codec.pulsar import pb
from ...topics.autocreate import AutoCreation, in_force, namespace_policies
from .errors import pulsar_error


class TopicMissing(Exception):
    """The topic does not exist and may not be created here (Pulsar's TopicNotFound)."""

    server_error = pb.TopicNotFound


async def _stored(service, name: TopicName) -> bool:
    if service.registry.loaded(name) is not None:
        return True
    try:
        await service.storage.stream_id(str(name))
    except StreamNotFound:
        return False
    return True


def _exists_unrecorded(name: TopicName) -> bool:
    """A non-persistent topic that is not partitioned exists wherever its namespace does."""
    return name.domain == "non-persistent" and name.partition_index < 0


async def _recorded(service, name: TopicName) -> bool:
    """Whether the metadata plane records ``name``: a partition of a partitioned topic, or a stored topic.
    Its namespace then exists too (deleting a namespace deletes its topics first)."""
    base = name.base
    if base is not name and name.partition_index < await partitions_of(service.meta, base):
        return True
    return name.domain == "persistent" and await _stored(service, name)


def _no_namespace(name: TopicName) -> TopicMissing:
    return TopicMissing(f"Tenant or namespace does not exist: {name.namespace_name}")


async def require_namespace(service, name: TopicName) -> None:
    """Raise TopicMissing if ``name``'s tenant or namespace does not exist."""
    if service.registry.in_use(name):
        return
    if await namespace_policies(service.meta, name.tenant, name.namespace) is None:
        raise _no_namespace(name)


async def rule_for(service, name: TopicName) -> AutoCreation:
    """The auto-creation rule of ``name``'s namespace; raises TopicMissing if the namespace does not exist."""
    policies = await namespace_policies(service.meta, name.tenant, name.namespace)
    if policies is None:
        raise _no_namespace(name)
    return in_force(service.registry.auto_creation, policies)


async def check_usable(service, name: TopicName) -> bool:
    """Raise TopicMissing unless ``name`` exists or may be created on first use now.

    Returns whether the metadata plane records it (False: it is to be created on first use)."""
    if service.registry.in_use(name) or await _recorded(service, name):
        return True
    rule = await rule_for(service, name)  # TopicMissing if the namespace does not exist
    if not (_exists_unrecorded(name) or rule.allowed):
        raise TopicMissing(f"Topic {name} does not exist")
    return False


def refused_here(conn, request_id: int, name: TopicName) -> bool:
    """True, after answering ServiceNotReady, when this broker cannot serve ``name`` now (it lost its
    metadata session): the client looks the topic up again, elsewhere, before anything here waits."""
    try:
        conn.service.registry.placement.check_serving(str(name))
    except NotOwner as exc:
        conn.send_error(request_id, pulsar_error(exc), str(exc))
        return True
    return False


async def usable_topic(service, name: TopicName):
    """The loaded topic ``name`` once ``check_usable`` passes (TopicMissing, NotOwner otherwise)."""
    recorded = await check_usable(service, name)
    return await service.get_topic(name, likely_absent=not recorded)


async def partitions_for_client(service, name: TopicName, *, may_create: bool) -> int:
    """Partitions to report for ``name``, creating a partitioned topic when the rule says so."""
    partitions = await partitions_of(service.meta, name)
    if partitions or await _recorded(service, name):
        return partitions  # no need to read the policies of a recorded topic's namespace
    rule = await rule_for(service, name)
    if name.partition_index >= 0 or _exists_unrecorded(name):
        return partitions
    if rule.allowed and rule.partitioned and may_create:
        await create_partitioned_topic(service.meta, name, rule.partitions)  # False: created meanwhile
        return await partitions_of(service.meta, name)
    if not rule.allowed and not may_create:
        raise TopicMissing(f"Topic {name} does not exist")
    return 0  # a non-partitioned topic, created on first use (or refused then)


__all__ = ["TopicMissing", "check_usable", "partitions_for_client", "require_namespace", "refused_here", "rule_for", "usable_topic"]
