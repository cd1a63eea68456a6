"""The ``Policies`` body of ``PUT /admin/v2/namespaces/{tenant}/{namespace}``: a namespace created with them.

Each field of Pulsar's ``Policies`` that this broker keeps is checked and stored as its own
admin path stores it: ``auth_policies`` (``namespace_auth``, ``destination_auth``,
``subscription_auth_roles``), ``replication_clusters`` (each a known cluster and one of
the tenant's allowed clusters, else 403 as Pulsar answers), ``retention_policies``, ``deduplicationEnabled``,
``schema_compatibility_strategy``, ``is_allow_auto_update_schema``,
``schema_auto_update_compatibility_strategy``, ``autoTopicCreationOverride``, the rates
(``publishMaxMessageRate``, ``topicDispatchRate``, ``subscriptionDispatchRate``, per
cluster) and ``compaction_threshold``.

As Pulsar reads the body: fields it does not know are ignored, a null field is unset, and
a value its enums do not know (a strategy name) reads as unset. A field of the wrong
shape is a 400 that names it.
"""

from __future__ import annotations

from ...auth.authorization import AUTH_FIELD, InvalidActions, empty_auth_policies, validate_actions
from ...ledger.clusters import NAMESPACE_REPLICATION_FIELD
from ...ledger.naming import InvalidTopicName, TopicName
from ...topics.autocreate import OVERRIDE_FIELD, InvalidAutoCreation, PartitionsOverLimit, validate_override
from ...topics.schemas import AUTO_UPDATE_STRATEGIES, STRATEGIES
from . import retention
from .common import AdminError
from .compaction import NAMESPACE_FIELD as COMPACTION_FIELD, validate_threshold
from .rate_policies import POLICIES as RATE_POLICIES
from .replication import replication_clusters_of

REPLICATION_FIELD = NAMESPACE_REPLICATION_FIELD
#: namespace field -> validator of one cluster's rate
_RATE_VALIDATORS = {field: validate for field, _, validate in RATE_POLICIES.values()}


def _bad(field: str, what: str) -> AdminError:
    return AdminError(400, f"Invalid policies: {field} {what}")


def _mapping(value, field: str) -> dict:
    if not isinstance(value, dict) or not all(isinstance(k, str) and k for k in value):
        raise _bad(field, "must be a JSON object keyed by name")
    return value


def _actions(value, field: str) -> list[str]:
    try:
        return validate_actions(value)
    except InvalidActions as exc:
        raise _bad(field, str(exc)) from None


def auth_policies_of(value) -> dict:
    """Pulsar's ``AuthPolicies`` checked: role grants of the namespace and of topics, and subscription roles."""
    given = _mapping(value, AUTH_FIELD)
    out = empty_auth_policies()
    for role, actions in _mapping(given.get("namespace_auth") or {}, "namespace_auth").items():
        out["namespace_auth"][role] = _actions(actions, f"namespace_auth.{role}")
    for topic, grants in _mapping(given.get("destination_auth") or {}, "destination_auth").items():
        try:
            name = TopicName.parse(topic)
        except InvalidTopicName:
            raise _bad("destination_auth", f"names an invalid topic {topic!r}") from None
        key = str(name.base) if name.partition_index >= 0 else str(name)
        out["destination_auth"][key] = {role: _actions(actions, f"destination_auth.{topic}.{role}")
                                        for role, actions in _mapping(grants or {}, "destination_auth").items()}
    for subscription, roles in _mapping(given.get("subscription_auth_roles") or {},
                                        "subscription_auth_roles").items():
        if not isinstance(roles, list) or not all(isinstance(r, str) and r for r in roles):
            raise _bad("subscription_auth_roles", f"of {subscription!r} must be a list of role names")
        out["subscription_auth_roles"][subscription] = sorted(set(roles))
    return out


def _flag(value, field: str) -> bool:
    if not isinstance(value, bool):
        raise _bad(field, "must be true or false")
    return value


def _rates(value, field: str) -> dict:
    validate = _RATE_VALIDATORS[field]
    return {cluster: validate(rate) for cluster, rate in _mapping(value, field).items() if rate is not None}


def policies_from_body(given, tenant: str, tenant_info: dict, max_partitions: int, *, local_cluster: str,
                       known_clusters: set[str]) -> dict:
    """The namespace record to create from a ``Policies`` body (None or empty: no policies).

    ``local_cluster``: the tenant's allowed cluster when its record names none;
    ``known_clusters``: the clusters a replication list may name."""
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise AdminError(400, "The policies must be a JSON object")
    stored: dict = {}
    for field, value in given.items():
        if value is None:
            continue
        if field == AUTH_FIELD:
            auth = auth_policies_of(value)
            if any(auth.values()):
                stored[field] = auth
        elif field == REPLICATION_FIELD:
            if value:  # empty: the local cluster, as Pulsar defaults it
                stored[field] = replication_clusters_of(
                    value, tenant=tenant, allowed=tenant_info.get("allowedClusters") or [local_cluster],
                    known=known_clusters)
        elif field == "retention_policies":
            stored[field] = retention.validate(value)
        elif field in ("deduplicationEnabled", "is_allow_auto_update_schema"):
            stored[field] = _flag(value, field)
        elif field == "schema_compatibility_strategy":
            if value in STRATEGIES:  # UNDEFINED or a name Pulsar does not know: unset
                stored[field] = value
        elif field == "schema_auto_update_compatibility_strategy":
            if value in AUTO_UPDATE_STRATEGIES:
                stored[field] = value
        elif field == OVERRIDE_FIELD:
            stored[field] = auto_creation(value, max_partitions)
        elif field in _RATE_VALIDATORS:
            rates = _rates(value, field)
            if rates:
                stored[field] = rates
        elif field == COMPACTION_FIELD:
            stored[field] = validate_threshold(value)
    return stored


def auto_creation(value, max_partitions: int) -> dict:
    """A namespace's ``autoTopicCreationOverride`` checked; AdminError when it is not valid."""
    try:
        return validate_override(value, max_partitions)
    except PartitionsOverLimit as exc:
        raise AdminError(406, str(exc)) from None
    except InvalidAutoCreation as exc:
        raise AdminError(400, f"Invalid autoTopicCreation policy: {exc}") from None


__all__ = ["REPLICATION_FIELD", "auth_policies_of", "auto_creation", "policies_from_body"]
