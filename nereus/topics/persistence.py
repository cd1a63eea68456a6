"""A namespace's persistence policy (Pulsar's ``PersistencePolicies``) as a storage durability.

Pulsar's fields keep their names and rules (``bookkeeperEnsemble >= bookkeeperWriteQuorum
>= bookkeeperAckQuorum >= 1``); ``walProfile`` says where acknowledged writes live until
they are in the object store (``object``, ``replicated``, ``local``; unset: the broker's
default profile). ``managedLedgerMaxMarkDeleteRate`` is kept and shown, and means nothing
here: acknowledgements are persisted as they come.
"""

from __future__ import annotations

from ..storage.wal_replicas import PROFILES, Durability

FIELD = "persistence"
_QUORUMS = ("bookkeeperEnsemble", "bookkeeperWriteQuorum", "bookkeeperAckQuorum")


class InvalidPersistence(ValueError):
    """A persistence policy that cannot be applied (the message says why)."""


def validate(value: object) -> dict:
    """The policy as stored; raises InvalidPersistence."""
    if not isinstance(value, dict):
        raise InvalidPersistence("The persistence policies must be a JSON object")
    out: dict = {}
    for name in _QUORUMS:
        number = value.get(name, 0)
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise InvalidPersistence(f"{name} must be a non-negative integer")
        out[name] = number
    ensemble, write, ack = (out[name] for name in _QUORUMS)
    if not (ensemble >= write >= ack >= 1):  # Pulsar's own check and wording
        raise InvalidPersistence(f"Bookkeeper Ensemble ({ensemble}) >= WriteQuorum ({write}) >= AckQuoru ({ack}) "
                                 "must hold, and AckQuorum must be at least 1")
    rate = value.get("managedLedgerMaxMarkDeleteRate", 0.0)
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate < 0:
        raise InvalidPersistence("managedLedgerMaxMarkDeleteRate must be a non-negative number")
    out["managedLedgerMaxMarkDeleteRate"] = float(rate)
    profile = value.get("walProfile")
    if profile is not None:
        if profile not in PROFILES:
            raise InvalidPersistence(f"walProfile must be one of {', '.join(PROFILES)}, not {profile!r}")
        out["walProfile"] = profile
    return out


def durability_of(policy: object, default: Durability) -> Durability:
    """The durability of a namespace whose policy is ``policy`` (None: the broker's ``default``)."""
    if not isinstance(policy, dict):
        return default
    profile = policy.get("walProfile") or default.profile
    if profile == "local":
        return Durability.local()
    if profile == "object":
        return Durability()
    try:
        return Durability(profile, policy["bookkeeperEnsemble"], policy["bookkeeperWriteQuorum"],
                          policy["bookkeeperAckQuorum"])
    except (KeyError, TypeError, ValueError):
        return default


def as_policy(durability: Durability) -> dict:
    """A durability as Pulsar's PersistencePolicies (the broker's defaults, for ``?applied=true``)."""
    return {"bookkeeperEnsemble": durability.ensemble, "bookkeeperWriteQuorum": durability.write_quorum,
            "bookkeeperAckQuorum": durability.ack_quorum, "managedLedgerMaxMarkDeleteRate": 0.0,
            "walProfile": durability.profile}


__all__ = ["FIELD", "InvalidPersistence", "as_policy", "durability_of", "validate"]
