"""CreateAcls, DescribeAcls, DeleteAcls (the check the other handlers make is ``access.allowed``).

Without ``authorizationEnabled`` the ACL calls answer SECURITY_DISABLED, as a Kafka
broker without an authorizer does. Managing ACLs (and
SCRAM credentials) needs ALTER on the cluster: a superuser, an admin of the Kafka
topics' tenant, or an ACL granting it.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from ....auth import kafka_acls
from ....auth.kafka_acls import ALTER, CLUSTER, DESCRIBE, Binding, InvalidAcl
from ....codec.kafka import NO_THROTTLE, make, nested
from ....codec.kafka.protocol import response_schema
from .access import CLUSTER_NAME, allowed
from .context import SecurityContext

log = logging.getLogger(__name__)

_DISABLED = "No Authorizer is configured (authorizationEnabled=false)"


def _response(head, **values):
    return make(response_schema(head.api_key, head.api_version), throttle_time=NO_THROTTLE, **values)


async def handle_create_acls(ctx: SecurityContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    result_cls = nested(cls, "AclCreationResult")

    def result(code, message=None):
        return make(result_cls, error_code=code, error_message=message)

    if conn.authorizer is None:
        return _response(head, results=tuple(result(ErrorCode.security_disabled, _DISABLED) for _ in req.creations))
    if not await allowed(conn, CLUSTER, CLUSTER_NAME, ALTER):
        return _response(head, results=tuple(result(ErrorCode.cluster_authorization_failed)
                                             for _ in req.creations))
    results, valid = [], []
    for creation in req.creations:
        try:
            binding = kafka_acls.validate(Binding(int(creation.resource_type), creation.resource_name,
                                                  int(creation.resource_pattern_type), creation.principal,
                                                  creation.host, int(creation.operation),
                                                  int(creation.permission_type)))
        except InvalidAcl as exc:
            results.append(result(ErrorCode.invalid_request, str(exc)))
            continue
        valid.append(binding)
        results.append(result(ErrorCode.none))
    if valid:
        await kafka_acls.update(ctx.meta,
                                lambda current: (current + [b for b in dict.fromkeys(valid) if b not in current], []))
    return _response(head, results=tuple(results))


def _filter_args(f) -> tuple:
    return (int(f.resource_type_filter), f.resource_name_filter, int(f.pattern_type_filter), f.principal_filter,
            f.host_filter, int(f.operation), int(f.permission_type))


async def handle_describe_acls(ctx: SecurityContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    resource_cls, acl_cls = nested(cls, "DescribeAclsResource"), nested(cls, "AclDescription")
    if conn.authorizer is None:
        return _response(head, error_code=ErrorCode.security_disabled, error_message=_DISABLED, resources=())
    if not await allowed(conn, CLUSTER, CLUSTER_NAME, DESCRIBE):
        return _response(head, error_code=ErrorCode.cluster_authorization_failed,
                         error_message="Cluster authorization failed", resources=())
    args = _filter_args(req)
    grouped: dict[tuple, list[Binding]] = {}
    for binding in await kafka_acls.load(ctx.meta):
        if kafka_acls.filter_matches(binding, *args):
            grouped.setdefault((binding.resource_type, binding.resource_name, binding.pattern_type), []).append(binding)
    resources = tuple(
        make(resource_cls, resource_type=rtype, resource_name=name, pattern_type=ptype,
             acls=tuple(make(acl_cls, principal=b.principal, host=b.host, operation=b.operation,
                             permission_type=b.permission_type) for b in bindings))
        for (rtype, name, ptype), bindings in grouped.items())
    return _response(head, error_code=ErrorCode.none, error_message=None, resources=resources)


async def handle_delete_acls(ctx: SecurityContext, conn, head, req):
    cls = response_schema(head.api_key, head.api_version)
    result_cls, match_cls = nested(cls, "DeleteAclsFilterResult"), nested(cls, "DeleteAclsMatchingAcl")
    if conn.authorizer is None or not await allowed(conn, CLUSTER, CLUSTER_NAME, ALTER):
        code = ErrorCode.security_disabled if conn.authorizer is None \
            else ErrorCode.cluster_authorization_failed
        return _response(head, filter_results=tuple(make(result_cls, error_code=code, error_message=None,
                                                         matching_acls=()) for _ in req.filters))
    filters = [_filter_args(f) for f in req.filters]

    def change(current: list[Binding]):
        matched = [[b for b in current if kafka_acls.filter_matches(b, *args)] for args in filters]
        gone = {b for group in matched for b in group}
        return [b for b in current if b not in gone], matched

    matched = await kafka_acls.update(ctx.meta, change)
    results = tuple(
        make(result_cls, error_code=ErrorCode.none, error_message=None,
             matching_acls=tuple(make(match_cls, error_code=ErrorCode.none, error_message=None,
                                      resource_type=b.resource_type, resource_name=b.resource_name,
                                      pattern_type=b.pattern_type, principal=b.principal, host=b.host,
                                      operation=b.operation, permission_type=b.permission_type)
                                 for b in group))
        for group in matched)
    return _response(head, filter_results=results)


__all__ = ["handle_create_acls", "handle_delete_acls", "handle_describe_acls"]
