"""Authentication of a Pulsar connection: CONNECT's credentials, and their refresh.

With authentication enabled, CONNECT's ``auth_method_name`` / ``auth_data`` (or the
verified TLS client certificate) must prove a role before CONNECTED is sent; a refusal
is an ERROR (AuthenticationError) and the connection closes, as Pulsar's broker does.

Refresh follows Pulsar: every ``authenticationRefreshCheckSeconds`` the connection's
credentials are checked; once expired, a client that announced ``supports_auth_refresh``
gets AUTH_CHALLENGE and must answer AUTH_RESPONSE with fresh credentials for the same
role before the next check; any other client, an invalid answer or no answer closes it.
"""

from __future__ import annotations

import asyncio
import logging
import time

from ...auth import AuthenticationFailed
from ...tls import peer_cert_cn
from ...codec.pulsar import pb, wrap
from .existence import require_namespace

log = logging.getLogger(__name__)

#: The challenge data asking a client for fresh credentials (Pulsar's AuthData.REFRESH_AUTH_DATA).
REFRESH_AUTH_DATA = b"PulsarAuthRefresh"
#: CONNECT's client_version of clients that drop a connection whose CONNECT is answered by an ERROR.
_CONNECT_ERROR_UNREAD = ("Pulsar-CPP-",)
#: Pulsar answers a connection-level error with request id -1 (as an unsigned 64-bit value).
NO_REQUEST = (1 << 64) - 1


def _peer_cn(conn) -> str | None:
    return peer_cert_cn(conn.transport)


def refuse(conn, reason: str) -> None:
    """Answer AuthenticationError and close."""
    log.info("authentication of %s refused: %s", conn.peer, reason)
    conn.send(wrap(pb.CommandError(request_id=NO_REQUEST, error=pb.AuthenticationError, message=reason)))
    conn.close_after_answer()


def authenticate_connect(conn, cmd: pb.CommandConnect) -> bool:
    """Give ``conn`` its role from CONNECT; False when refused (the connection is closing).

    A client that cannot read an ERROR answering its CONNECT (the C++ client and the
    clients built on it drop the connection and retry until their operation timeout,
    so the user sees a timeout) is answered CONNECTED instead, and its first request
    gets the AuthenticationError (``refuse_request``) before the connection closes.
    """
    authenticator = conn.service.authenticator
    if authenticator is None:
        return True
    try:
        identity = authenticator.authenticate(cmd.auth_method_name, cmd.auth_data, peer_cn=_peer_cn(conn))
    except AuthenticationFailed as exc:
        reason = f"Unable to authenticate: {exc}"
        if cmd.client_version.startswith(_CONNECT_ERROR_UNREAD):
            log.info("authentication of %s refused: %s", conn.peer, reason)
            conn.auth_refusal = reason
            return True
        refuse(conn, reason)
        return False
    conn.identity, conn.role = identity, identity.role
    conn.supports_auth_refresh = cmd.feature_flags.supports_auth_refresh
    if identity.expires_at is not None:
        _arm(conn)
    log.debug("connection from %s authenticated as %s (%s)", conn.peer, identity.role, identity.method)
    return True


def refuse_request(conn, frame) -> None:
    """Answer the first request of a connection whose CONNECT failed authentication, then close it."""
    body, reason = frame.body, conn.auth_refusal
    request_id = getattr(body, "request_id", None) if "request_id" in body.DESCRIPTOR.fields_by_name else None
    if isinstance(body, pb.CommandPartitionedTopicMetadata):
        conn.send(wrap(pb.CommandPartitionedTopicMetadataResponse(
            request_id=request_id, response=pb.CommandPartitionedTopicMetadataResponse.Failed,
            error=pb.AuthenticationError, message=reason)))
    elif isinstance(body, pb.CommandLookupTopic):
        conn.send(wrap(pb.CommandLookupTopicResponse(
            request_id=request_id, response=pb.CommandLookupTopicResponse.Failed,
            error=pb.AuthenticationError, message=reason)))
    elif request_id is not None:
        conn.send(wrap(pb.CommandError(request_id=request_id, error=pb.AuthenticationError, message=reason)))
    conn.close_after_answer()


def _arm(conn) -> None:
    interval = conn.service.authenticator.settings.refresh_check_seconds
    conn.auth_timer = asyncio.get_running_loop().call_later(interval, _check, conn)


def _check(conn) -> None:
    if conn.closed:
        return
    if conn.auth_refresh_pending:
        log.info("closing connection from %s: no fresh credentials after the refresh challenge", conn.peer)
        conn.close()
        return
    expires_at = conn.identity.expires_at
    if expires_at is not None and expires_at <= time.time():
        if not conn.supports_auth_refresh:
            log.info("closing connection from %s: its credentials expired", conn.peer)
            conn.close()
            return
        conn.auth_refresh_pending = True
        conn.send(wrap(pb.CommandAuthChallenge(
            server_version=conn.server_version, protocol_version=conn.protocol_version,
            challenge=pb.AuthData(auth_method_name=conn.identity.method, auth_data=REFRESH_AUTH_DATA))))
    _arm(conn)


def handle_auth_response(conn, frame) -> None:
    """AUTH_RESPONSE: fresh credentials for the connection's role."""
    cmd: pb.CommandAuthResponse = frame.body
    authenticator = conn.service.authenticator
    if authenticator is None or conn.identity is None:
        refuse(conn, "authentication is not enabled on this broker")
        return
    method = cmd.response.auth_method_name or conn.identity.method
    try:
        identity = authenticator.authenticate(method, cmd.response.auth_data, peer_cn=_peer_cn(conn))
    except AuthenticationFailed as exc:
        refuse(conn, f"Unable to refresh authentication: {exc}")
        return
    if identity.role != conn.role:
        refuse(conn, f"the role cannot change when credentials are refreshed ({conn.role} -> {identity.role})")
        return
    conn.identity, conn.auth_refresh_pending = identity, False
    log.debug("connection from %s refreshed its credentials", conn.peer)


async def denial(conn, topic, action: str | None, subscription: str | None = None) -> str | None:
    """None if the connection's role may ``action`` (produce, consume; None: lookup) ``topic`` (with
    ``subscription``), else why not.

    Raises TopicMissing first when the topic's tenant or namespace does not exist: Pulsar
    answers a wrong name with TopicNotFound whatever the role may do."""
    authorizer = conn.service.authorizer
    if authorizer is None:
        return None
    await require_namespace(conn.service, topic)
    return await authorizer.denial(conn.role, topic, action, subscription)


__all__ = ["REFRESH_AUTH_DATA", "authenticate_connect", "denial", "handle_auth_response", "refuse",
           "refuse_request"]
