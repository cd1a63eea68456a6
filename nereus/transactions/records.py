"""The coordinator's state record (JSON in the metadata plane), its keys and its state machine.

Rules of the state machine (``TRANSITIONS`` below is the whole table):

* EMPTY / COMPLETE_COMMIT / COMPLETE_ABORT -> ONGOING: the first partition, group or
  subscription of a transaction is added.
* ONGOING -> PREPARE_COMMIT / PREPARE_ABORT: the decision, durable before any marker.
* PREPARE_X -> COMPLETE_X: every participant wrote its marker / applied its offsets.
* EMPTY / COMPLETE_* -> EMPTY: a producer (re)initialised (epoch bump).
* ONGOING -> PREPARE_ABORT also with an epoch bump (re-init or timeout fences the zombie).
* any -> DEAD: the record is being forgotten.

Keys: ``/nereus/txn/coord/{quoted key}`` holds a record; ``/nereus/txn/pid/{pid:020d}``
names the key of the record that gave out that producer id. A Kafka record keeps at most
two such entries (its producer id and the one before its last epoch exhaustion); they go
with the record. Records in ONGOING or
PREPARE_* carry the secondary index ``ACTIVE_INDEX`` (ONGOING by deadline, PREPARE_* by
update time, finished Pulsar ones by update time), so the background loop scans only
the records it has work for.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from urllib.parse import quote

COORD_ROOT = "/nereus/txn/coord"
PID_ROOT = "/nereus/txn/pid"
ACTIVE_INDEX = "nereus-txn-active"
MAX_EPOCH = 32767  # Kafka's epochs are int16; an epoch that would reach this gets a new producer id


class TxnState(str, Enum):
    EMPTY = "EMPTY"
    ONGOING = "ONGOING"
    PREPARE_COMMIT = "PREPARE_COMMIT"
    PREPARE_ABORT = "PREPARE_ABORT"
    COMPLETE_COMMIT = "COMPLETE_COMMIT"
    COMPLETE_ABORT = "COMPLETE_ABORT"
    PREPARE_EPOCH_FENCE = "PREPARE_EPOCH_FENCE"
    DEAD = "DEAD"

    @property
    def prepared(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def completed(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


S = TxnState
TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    S.ONGOING: frozenset({S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE, S.DEAD}),
    S.PREPARE_COMMIT: frozenset({S.COMPLETE_COMMIT, S.DEAD}),
    S.PREPARE_ABORT: frozenset({S.COMPLETE_ABORT, S.DEAD}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.PREPARE_ABORT, S.DEAD}),
    S.COMPLETE_COMMIT: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    S.COMPLETE_ABORT: frozenset({S.EMPTY, S.ONGOING, S.DEAD}),
    S.DEAD: frozenset({S.EMPTY}),
}


def may_transition(old: TxnState, new: TxnState) -> bool:
    return new in TRANSITIONS[old]


@dataclass(frozen=True, slots=True)
class TxnRecord:
    """One transactional id's (Kafka) or one transaction's (Pulsar) state."""

    key: str  # "kafka:{transactional_id}" or "pulsar:{most}:{least}"
    producer_id: int
    producer_epoch: int
    state: TxnState
    timeout_ms: int
    start_ms: int = -1  # when it went ONGOING
    update_ms: int = -1
    partitions: list[str] = field(default_factory=list)  # full topic names
    groups: list[str] = field(default_factory=list)  # Kafka groups of AddOffsetsToTxn
    subscriptions: list[tuple[str, str]] = field(default_factory=list)  # Pulsar (topic, subscription)
    last_producer_epoch: int = -1  # the epoch before a bump (a retried InitProducerId/EndTxn of it is known)
    owner: str | None = None  # the role that opened a Pulsar transaction (only it and superusers may use it)
    # The producer id given up at the last epoch exhaustion (Kafka's previousProducerId): its pid index
    # entry is kept so that its zombie is still answered as fenced; older ones are deleted.
    previous_producer_id: int = -1
    # Counts the transactions begun under this record. It tags what each one leaves in partitions
    # (open records) and groups (pending offsets), and its markers: the late marker of a finished
    # transaction never ends the next one of the same producer id and epoch.
    sequence: int = 0

    @property
    def deadline_ms(self) -> int:
        return self.start_ms + self.timeout_ms

    @property
    def is_pulsar(self) -> bool:
        return self.key.startswith("pulsar:")

    def with_(self, **changes) -> "TxnRecord":
        return replace(self, **changes)

    def to_json(self) -> bytes:
        value = asdict(self)
        value["state"] = self.state.value
        value["subscriptions"] = [list(s) for s in self.subscriptions]
        return json.dumps(value, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes) -> "TxnRecord":
        value = json.loads(data)
        value["state"] = TxnState(value["state"])
        value["subscriptions"] = [tuple(s) for s in value.get("subscriptions", [])]
        return cls(**value)

    def active_index(self) -> dict[str, str]:
        """The secondary index entry of a live transaction (none otherwise)."""
        if self.state == TxnState.ONGOING:
            return {ACTIVE_INDEX: f"ONGOING-{self.deadline_ms:020d}"}
        if self.state.prepared or self.state == TxnState.PREPARE_EPOCH_FENCE:
            return {ACTIVE_INDEX: f"PREPARE-{self.update_ms:020d}"}
        if self.is_pulsar and self.state.completed:  # forgotten after a while (a Pulsar txn is used once)
            return {ACTIVE_INDEX: f"DONE-{self.update_ms:020d}"}
        return {}


def kafka_key(transactional_id: str) -> str:
    return f"kafka:{transactional_id}"


def pulsar_key(most_bits: int, least_bits: int) -> str:
    return f"pulsar:{most_bits}:{least_bits}"


def record_key(key: str) -> str:
    return f"{COORD_ROOT}/{quote(key, safe=':')}"


def records_range() -> tuple[str, str]:
    return f"{COORD_ROOT}/", f"{COORD_ROOT}/\U0010ffff"


def pid_key(producer_id: int) -> str:
    return f"{PID_ROOT}/{producer_id:020d}"


__all__ = ["ACTIVE_INDEX", "COORD_ROOT", "MAX_EPOCH", "PID_ROOT", "TRANSITIONS", "TxnRecord", "TxnState",
           "kafka_key", "may_transition", "pid_key", "pulsar_key", "record_key", "records_range"]
