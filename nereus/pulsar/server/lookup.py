"""Topic discovery: LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE, GET_SCHEMA, GET_OR_CREATE_SCHEMA.

Any broker answers a lookup: ``Connect`` to the topic's owner, or ``Redirect`` to
the broker the ring gives it when nobody owns it yet (that broker takes it), at
the URL of the advertised listener the client names (``listener_name``). Topics
are auto-created on first PRODUCER or SUBSCRIBE where allowed (existence.py: a
missing namespace, or a missing topic that may not be created, is TopicNotFound);
partitioned topics come from metadata (see topics.py), and PARTITIONED_METADATA
creates one when the namespace's rule says partitioned.
"""

from __future__ import annotations

import re

from ...ledger.naming import InvalidTopicName, TopicName
from ...topics import NotOwner, UnknownListener
from ...codec.pulsar import pb, wrap
from . import schemas, transactions
from .authn import denial
from .errors import pulsar_error
from .existence import TopicMissing, check_usable, partitions_for_client, refused_here
from .topics import list_partitioned_topics, partitions_of

_Lookup = pb.CommandLookupTopicResponse
_Meta = pb.CommandPartitionedTopicMetadataResponse
_Mode = pb.CommandGetTopicsOfNamespace


def parse_topic(name: str) -> TopicName | None:
    try:
        return TopicName.parse(name)
    except InvalidTopicName:
        return None


async def admitted_topic(conn, cmd, action: str, subscription: str | None = None) -> TopicName | None:
    """The topic of a PRODUCER or SUBSCRIBE once it is valid, served here and ``action`` on it granted;
    None after answering the request's error."""
    name = parse_topic(cmd.topic)
    if name is None:
        conn.send_error(cmd.request_id, pb.InvalidTopicName, f"invalid topic name {cmd.topic!r}")
        return None
    if refused_here(conn, cmd.request_id, name):
        return None
    try:
        refused = await denial(conn, name, action, subscription)
    except TopicMissing as exc:
        conn.send_error(cmd.request_id, pb.TopicNotFound, str(exc))
        return None
    if refused:
        conn.send_error(cmd.request_id, pb.AuthorizationError, refused)
        return None
    return name


async def handle_lookup(conn, cmd: pb.CommandLookupTopic) -> None:
    topic = parse_topic(cmd.topic)
    if topic is None:
        conn.send(wrap(_Lookup(request_id=cmd.request_id, response=_Lookup.Failed, error=pb.InvalidTopicName,
                               message=f"invalid topic name {cmd.topic!r}")))
        return
    if transactions.is_tc_topic(topic):
        _lookup_tc(conn, cmd, topic)
        return
    try:
        # No metadata session: the client is sent on at once, also when the session goes while
        # this lookup waits on metadata (it would wait for as long as the cut lasts).
        await conn.service.registry.placement.while_serving(str(topic), _answer_lookup(conn, cmd, topic))
    except NotOwner as exc:
        _elsewhere(conn, cmd, exc)


async def _answer_lookup(conn, cmd: pb.CommandLookupTopic, topic: TopicName) -> None:
    placement = conn.service.registry.placement
    try:
        refused = await denial(conn, topic, None)
        if not refused:
            await check_usable(conn.service, topic)
    except TopicMissing as exc:
        conn.send(wrap(_Lookup(request_id=cmd.request_id, response=_Lookup.Failed, error=pb.TopicNotFound,
                               message=str(exc))))
        return
    if refused:
        conn.send(wrap(_Lookup(request_id=cmd.request_id, response=_Lookup.Failed, error=pb.AuthorizationError,
                               message=refused)))
        return
    try:
        broker, final = await placement.lookup(str(topic), authoritative=cmd.authoritative)
    except NotOwner as exc:  # its owner just died: the client retries once the topic has moved
        _elsewhere(conn, cmd, exc)
        return
    # The listener the client names (an empty name is none: some clients send one), else the one it came in by.
    listener = cmd.advertised_listener_name or conn.listener
    local = broker.name == placement.local.name and not listener
    try:
        url = conn.service.service_url if local else broker.urls_for(listener)[0]
        # As Pulsar: both URLs; a client of pulsar+ssl:// uses the TLS one.
        tls_url = conn.service.service_url_tls if local else broker.tls_urls_for(listener)[0]
    except UnknownListener as exc:  # Pulsar's answer: an error the client does not retry
        conn.send(wrap(_Lookup(request_id=cmd.request_id, response=_Lookup.Failed, error=pb.UnknownError,
                               message=str(exc))))
        return
    # Connect: the broker serves the topic. Redirect (authoritative): ask that broker, which then takes it.
    conn.send(wrap(_Lookup(request_id=cmd.request_id, response=_Lookup.Connect if final else _Lookup.Redirect,
                           brokerServiceUrl=url, brokerServiceUrlTls=tls_url, authoritative=True,
                           proxy_through_service_url=False)))


def _elsewhere(conn, cmd: pb.CommandLookupTopic, exc: NotOwner) -> None:
    """Not here: a redirect to the broker ``exc`` names (the client asks it), else ServiceNotReady
    (the client retries)."""
    listener = cmd.advertised_listener_name or conn.listener
    if exc.owner is not None:
        try:
            url, tls_url = exc.owner.urls_for(listener)[0], exc.owner.tls_urls_for(listener)[0]
        except UnknownListener:
            pass
        else:
            conn.send(wrap(_Lookup(request_id=cmd.request_id, response=_Lookup.Redirect, brokerServiceUrl=url,
                                   brokerServiceUrlTls=tls_url, authoritative=False,
                                   proxy_through_service_url=False)))
            return
    conn.send(wrap(_Lookup(request_id=cmd.request_id, response=_Lookup.Failed, error=pb.ServiceNotReady,
                           message=str(exc))))


def _lookup_tc(conn, cmd: pb.CommandLookupTopic, topic: TopicName) -> None:
    """A coordinator's topic: this broker (the coordinators' state is shared through the metadata plane)."""
    if transactions.coordinator_of(conn) is None or topic.partition_index >= transactions.TC_COUNT:
        conn.send(wrap(_Lookup(request_id=cmd.request_id, response=_Lookup.Failed,
                               error=pb.TransactionCoordinatorNotFound,
                               message=f"no transaction coordinator serves {topic}")))
        return
    listener = cmd.advertised_listener_name or conn.listener
    local = conn.service.registry.placement.local
    try:
        url = local.urls_for(listener)[0] if listener else conn.service.service_url
        tls_url = local.tls_urls_for(listener)[0] if listener else conn.service.service_url_tls
    except UnknownListener as exc:
        conn.send(wrap(_Lookup(request_id=cmd.request_id, response=_Lookup.Failed, error=pb.UnknownError,
                               message=str(exc))))
        return
    conn.send(wrap(_Lookup(request_id=cmd.request_id, response=_Lookup.Connect, brokerServiceUrl=url,
                           brokerServiceUrlTls=tls_url,
                           authoritative=True, proxy_through_service_url=False)))


async def handle_partitioned_metadata(conn, cmd: pb.CommandPartitionedTopicMetadata) -> None:
    topic = parse_topic(cmd.topic)
    if topic is None:
        conn.send(wrap(_Meta(request_id=cmd.request_id, response=_Meta.Failed, error=pb.InvalidTopicName,
                             message=f"invalid topic name {cmd.topic!r}")))
        return
    try:
        await conn.service.registry.placement.while_serving(str(topic), _answer_partitions(conn, cmd, topic))
    except NotOwner as exc:  # no metadata session here: the client retries, by another broker if it has one
        conn.send(wrap(_Meta(request_id=cmd.request_id, response=_Meta.Failed, error=pulsar_error(exc),
                             message=str(exc))))


async def _answer_partitions(conn, cmd: pb.CommandPartitionedTopicMetadata, topic: TopicName) -> None:
    if transactions.is_tc_topic(topic):  # one partition per coordinator; none without transactions
        available = transactions.coordinator_of(conn) is not None and topic.partition_index < 0
        conn.send(wrap(_Meta(request_id=cmd.request_id, response=_Meta.Success,
                             partitions=transactions.TC_COUNT if available else 0)))
        return
    try:
        refused = await denial(conn, topic, None)
        if refused:
            conn.send(wrap(_Meta(request_id=cmd.request_id, response=_Meta.Failed, error=pb.AuthorizationError,
                                 message=refused)))
            return
        partitions = await partitions_for_client(conn.service, topic, may_create=cmd.metadata_auto_creation_enabled)
    except TopicMissing as exc:
        conn.send(wrap(_Meta(request_id=cmd.request_id, response=_Meta.Failed, error=pb.TopicNotFound,
                             message=str(exc))))
        return
    conn.send(wrap(_Meta(request_id=cmd.request_id, response=_Meta.Success, partitions=partitions)))


async def handle_get_topics(conn, cmd: pb.CommandGetTopicsOfNamespace) -> None:
    """Every topic (partitions listed individually, as Pulsar does) of a namespace."""
    namespace = cmd.namespace.strip("/")
    authorizer = conn.service.authorizer
    if authorizer is not None and not await authorizer.may_list(conn.role, *(namespace.split("/", 1) + [""])[:2]):
        conn.send_error(cmd.request_id, pb.AuthorizationError,
                        f"Client with role {conn.role} is not authorized to list the topics of {namespace}")
        return
    domains = {_Mode.PERSISTENT: ("persistent",), _Mode.NON_PERSISTENT: ("non-persistent",),
               _Mode.ALL: ("persistent", "non-persistent")}[cmd.mode]
    prefixes = tuple(f"{d}://{namespace}/" for d in domains)
    names = {n for prefix in prefixes for n in await conn.service.storage.list_streams(prefix)}
    names.update(n for n in conn.service.registry.memory_topics if n.startswith(prefixes))
    for base in [b for prefix in prefixes for b in await list_partitioned_topics(conn.service.meta, prefix)]:
        topic = TopicName.parse(base)
        names.update(str(topic.partition(i)) for i in range(await partitions_of(conn.service.meta, topic)))
    topics = sorted(names)
    filtered = False
    if cmd.HasField("topics_pattern"):
        try:
            pattern = re.compile(cmd.topics_pattern.split("://", 1)[-1])
            topics = [t for t in topics if pattern.fullmatch(t.split("://", 1)[-1])]
            filtered = True
        except re.error:
            pass  # the client filters again with its own regex engine
    conn.send(wrap(pb.CommandGetTopicsOfNamespaceResponse(request_id=cmd.request_id, topics=topics,
                                                          filtered=filtered, changed=True)))


async def handle_get_schema(conn, cmd: pb.CommandGetSchema) -> None:
    topic = parse_topic(cmd.topic)
    version = schemas.version_from_bytes(cmd.schema_version) if cmd.HasField("schema_version") else None
    info = await schemas.get(conn.service.meta, topic, version) if topic is not None else None
    if info is None or info.deleted:
        conn.send(wrap(pb.CommandGetSchemaResponse(request_id=cmd.request_id, error_code=pb.TopicNotFound,
                                                   error_message="Topic not found or no-schema")))
        return
    conn.send(wrap(pb.CommandGetSchemaResponse(request_id=cmd.request_id, schema=schemas.to_proto(info, str(topic.base)),
                                               schema_version=schemas.version_bytes(info.version))))


async def handle_get_or_create_schema(conn, cmd: pb.CommandGetOrCreateSchema) -> None:
    topic = parse_topic(cmd.topic)
    response = pb.CommandGetOrCreateSchemaResponse(request_id=cmd.request_id)
    if topic is None:
        response.error_code, response.error_message = pb.InvalidTopicName, f"invalid topic name {cmd.topic!r}"
    else:
        try:
            version = await schemas.put_if_absent(
                conn.service.meta, topic, *schemas.from_proto(cmd.schema),
                default_strategy=conn.service.registry.schema_compatibility_strategy)
            response.schema_version = schemas.version_bytes(version)
        except (schemas.IncompatibleSchema, schemas.InvalidSchema) as exc:
            response.error_code, response.error_message = pb.IncompatibleSchema, str(exc)
    conn.send(wrap(response))


__all__ = ["admitted_topic", "handle_get_or_create_schema", "handle_get_schema", "handle_get_topics", "handle_lookup",
           "handle_partitioned_metadata", "parse_topic"]
