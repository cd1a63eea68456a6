"""Per-record validation of a produced batch, with Kafka's per-record errors (KIP-467).

A compacted topic takes keyed records only, and a topic with ``message.timestamp.type``
CreateTime takes records whose timestamps lie within ``message.timestamp.before.max.ms``
before and ``message.timestamp.after.max.ms`` after the broker's clock (each falls back
to ``message.timestamp.difference.max.ms`` while it has its default, as in Kafka 3.6+).
As Kafka does, a batch with any record at fault is refused whole, and the answer names
each record at fault by its index in the batch (Produce v8+ ``record_errors``): the
producer fails those with the error and the others with a "different record" error.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from ..catalog.config_defs import LONG_MAX

#: Kafka's exception message shows at most this many record errors.
_SHOWN = 3


@dataclass(frozen=True, slots=True)
class RecordErrors:
    """A refused batch: the partition's error, its message and (batch index, message) per record at fault."""

    code: int
    message: str
    errors: tuple[tuple[int, str], ...]


@dataclass(frozen=True, slots=True)
class RecordRules:
    """The per-record rules of one topic partition, from the topic's configs in force."""

    partition: str  # "topic-index", for messages
    compacted: bool
    before_ms: int  # how far behind the broker's clock a CreateTime timestamp may be
    after_ms: int  # how far ahead of it

    @classmethod
    def of(cls, configs: dict, partition: str, compacted: bool) -> RecordRules:
        if configs["message.timestamp.type"].value != "CreateTime":
            return cls(partition, compacted, LONG_MAX, LONG_MAX)
        difference = int(configs["message.timestamp.difference.max.ms"].value)
        before = int(configs["message.timestamp.before.max.ms"].value)
        after = int(configs["message.timestamp.after.max.ms"].value)
        return cls(partition, compacted, before if before != LONG_MAX else difference,
                   after if after != LONG_MAX else difference)

    @property
    def needed(self) -> bool:
        """True when some record could break a rule (else records need not be decoded)."""
        return self.compacted or self.before_ms < LONG_MAX or self.after_ms < LONG_MAX

    def check(self, batches: list[list], now_ms: int) -> RecordErrors | None:
        """The refusal of the decoded ``batches`` (lists of records), or None when every record passes.

        Indexes count records from the start of the request's records for the partition
        (one batch, as every Kafka producer sends).
        """
        errors: list[tuple[int, str]] = []
        timestamps_at_fault = False
        index = 0
        for records in batches:
            for record in records:
                problem = self._key_problem(record)
                if problem is None:
                    problem = self._timestamp_problem(record, now_ms)
                    timestamps_at_fault |= problem is not None
                if problem is not None:
                    errors.append((index, problem))
                index += 1
        if not errors:
            return None
        if timestamps_at_fault:
            return RecordErrors(ErrorCode.invalid_timestamp,
                                "One or more records have been rejected due to invalid timestamp", tuple(errors))
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{text}')" for i, text in errors[:_SHOWN])
        return RecordErrors(ErrorCode.invalid_record,
                            f"One or more records have been rejected due to {len(errors)} record errors in total, "
                            f"and only showing the first three errors at most: [{shown}]", tuple(errors))

    def _key_problem(self, record) -> str | None:
        if self.compacted and record.key is None:
            return f"Compacted topic cannot accept message without key in topic partition {self.partition}."
        return None

    def _timestamp_problem(self, record, now_ms: int) -> str | None:
        stamp = record.timestamp
        if stamp < 0:  # no timestamp (-1): nothing to check
            return None
        if now_ms - stamp > self.before_ms or stamp - now_ms > self.after_ms:
            low = now_ms - self.before_ms if self.before_ms < LONG_MAX else "-inf"
            high = now_ms + self.after_ms if self.after_ms < LONG_MAX else "+inf"
            return (f"Timestamp {stamp} of message with offset {record.offset_delta} is out of range. "
                    f"The timestamp should be within [{low}, {high}]")
        return None


__all__ = ["RecordErrors", "RecordRules"]
