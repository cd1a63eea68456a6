"""SaslHandshake, SaslAuthenticate, DescribeUserScramCredentials and AlterUserScramCredentials."""

from __future__ import annotations

import asyncio
import datetime
import logging

from kio.schema.errors import ErrorCode

from ....auth.kafka_acls import ALTER, CLUSTER, DESCRIBE
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from . import access
from .context import SecurityContext
from .sasl import SaslFailed
from .scram import MAX_ITERATIONS, MECHANISM_IDS, MECHANISM_NAMES, MIN_ITERATIONS, credential_from_salted

log = logging.getLogger(__name__)


def _response(head, **values):
    return make(response_schema(head.api_key, head.api_version), **values)


def handle_sasl_handshake(ctx: SecurityContext, conn, head, request):
    sasl = conn.sasl
    if sasl is None or sasl.in_exchange:  # a PLAINTEXT listener, or a second handshake mid-exchange
        return _response(head, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    if not sasl.handshake(request.mechanism, head.api_version):
        return _response(head, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=sasl.settings.mechanisms)
    return _response(head, error_code=ErrorCode.none, mechanisms=sasl.settings.mechanisms)


async def handle_sasl_authenticate(ctx: SecurityContext, conn, head, request):
    sasl = conn.sasl
    if sasl is None or not sasl.in_exchange:
        return _response(head, error_code=ErrorCode.illegal_sasl_state, auth_bytes=b"",
                         error_message="SaslAuthenticate without a SaslHandshake naming the mechanism")
    try:
        token = await sasl.step(request.auth_bytes)
    except SaslFailed as exc:
        log.info("kafka: SASL authentication of %s failed: %s", conn.peer, exc)
        asyncio.get_running_loop().call_soon(conn.close)  # after the response is written
        return _response(head, error_code=ErrorCode.sasl_authentication_failed, error_message=str(exc),
                         auth_bytes=b"")
    lifetime = sasl.session_lifetime_ms() if sasl.authenticated and not sasl.in_exchange else 0
    return _response(head, error_code=ErrorCode.none, error_message=None, auth_bytes=token,
                     session_lifetime=datetime.timedelta(milliseconds=lifetime))


async def raw_token(conn, token: bytes) -> bytes | None:
    """After a v0 handshake: one bare SASL token in, the server's token out (None: refused, close)."""
    try:
        return await conn.sasl.step(token)
    except SaslFailed as exc:
        log.info("kafka: SASL authentication of %s failed: %s", conn.peer, exc)
        return None


async def handle_describe_user_scram_credentials(ctx: SecurityContext, conn, head, request):
    rcls = response_schema(head.api_key, head.api_version)
    if not await access.allowed(conn, CLUSTER, access.CLUSTER_NAME, DESCRIBE):
        return make(rcls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                     error_message="Cluster authorization failed", results=())
    result_cls, info_cls = nested(rcls, "DescribeUserScramCredentialsResult"), nested(rcls, "CredentialInfo")
    store = ctx.scram
    results = []
    if request.users is None or len(request.users) == 0:  # every user with a credential
        for user, creds in sorted((await store.users()).items()):
            results.append(make(result_cls, user=user, error_code=ErrorCode.none, error_message=None,
                                credential_infos=_infos(info_cls, creds)))
    else:
        names = [u.name for u in request.users]
        for name in dict.fromkeys(names):
            if names.count(name) > 1:
                results.append(make(result_cls, user=name, error_code=ErrorCode.duplicate_resource,
                                    error_message=f"Cannot describe SCRAM credentials for the same user twice in a "
                                                  f"single request: {name}", credential_infos=()))
                continue
            creds = await store.get(name)
            if not creds:
                results.append(make(result_cls, user=name, error_code=ErrorCode.resource_not_found,
                                    error_message=f"Attempt to describe a user credential that does not exist: "
                                                  f"{name}", credential_infos=()))
                continue
            results.append(make(result_cls, user=name, error_code=ErrorCode.none, error_message=None,
                                credential_infos=_infos(info_cls, creds)))
    return make(rcls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                results=tuple(results))


def _infos(info_cls, creds) -> tuple:
    return tuple(make(info_cls, mechanism=MECHANISM_IDS[mech], iterations=cred.iterations)
                 for mech, cred in sorted(creds.items()))


def _check_alteration(change, upsert: bool) -> tuple[int, str] | None:
    if not change.name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if change.mechanism not in MECHANISM_NAMES:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    if upsert:
        if not MIN_ITERATIONS <= change.iterations <= MAX_ITERATIONS:
            return (ErrorCode.unacceptable_credential,
                    f"Iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}")
        if not change.salt or not change.salted_password:
            return ErrorCode.unacceptable_credential, "Salt and salted password must not be empty"
    return None


async def handle_alter_user_scram_credentials(ctx: SecurityContext, conn, head, request):
    rcls = response_schema(head.api_key, head.api_version)
    result_cls = nested(rcls, "AlterUserScramCredentialsResult")
    if not await access.allowed(conn, CLUSTER, access.CLUSTER_NAME, ALTER):  # as Kafka: ALTER on the cluster
        users = dict.fromkeys(c.name for c in list(request.deletions) + list(request.upsertions))
        return make(rcls, throttle_time=NO_THROTTLE, results=tuple(
            make(result_cls, user=user, error_code=ErrorCode.cluster_authorization_failed, error_message=None)
            for user in users))
    store = ctx.scram
    changes = [(d, False) for d in request.deletions] + [(u, True) for u in request.upsertions]
    errors: dict[str, tuple[int, str]] = {}
    seen: set[tuple[str, int]] = set()
    for change, upsert in changes:  # Kafka refuses a user's whole set of changes when one is bad
        problem = _check_alteration(change, upsert)
        if problem is None and (change.name, change.mechanism) in seen:
            problem = (ErrorCode.duplicate_resource,
                       "A user credential cannot be altered twice in the same request")
        seen.add((change.name, change.mechanism))
        if problem is not None:
            errors.setdefault(change.name, problem)
    for change, upsert in changes:
        if change.name in errors:
            continue
        mechanism = MECHANISM_NAMES[change.mechanism]
        if upsert:
            credential = credential_from_salted(mechanism, change.salt, change.salted_password, change.iterations)
            await store.set(change.name, mechanism, credential)
        elif not await store.delete(change.name, mechanism):
            errors[change.name] = (ErrorCode.resource_not_found,
                                   "Attempt to delete a user credential that does not exist")
    users = dict.fromkeys(change.name for change, _ in changes)
    results = tuple(make(result_cls, user=user, error_code=errors.get(user, (ErrorCode.none, None))[0],
                         error_message=errors.get(user, (ErrorCode.none, None))[1]) for user in users)
    return make(rcls, throttle_time=NO_THROTTLE, results=results)


__all__ = ["handle_alter_user_scram_credentials", "handle_describe_user_scram_credentials",
           "handle_sasl_authenticate", "handle_sasl_handshake", "raw_token"]
