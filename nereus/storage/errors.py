"""Errors of StreamStorage, named after the state they report."""


class StorageError(Exception):
    """Root of every StreamStorage error."""


class StreamNotFound(StorageError):
    """No stream has that name or id."""


class StreamExists(StorageError):
    """A stream with that name already exists."""


class StreamFenced(StorageError):
    """Another append session took this stream over; this writer may not commit."""


class AppendSessionLost(StreamFenced):
    """An earlier append of this session failed, so later ones may not commit out of order.

    The session is unusable: every append buffered or in flight behind the failed one
    fails too. The caller re-acquires (``Stream.acquire``) once it has dealt with the
    failed appends, e.g. after making its producers resend.
    """


class StreamClosed(StorageError):
    """The stream handle (or the storage) was closed."""


class OffsetOutOfRange(StorageError):
    """The offset is below the start offset or beyond the next offset."""


class InvalidAppend(StorageError):
    """The entry or its record count is not acceptable (empty, negative, too large)."""


class CorruptObject(StorageError):
    """An object's bytes fail their checksum or layout checks; nothing was served from it."""


class ObjectMissing(StorageError):
    """A committed index entry points to an object that cannot be read."""


class InvalidStreamName(StorageError):
    """The stream name is empty, too long or contains NUL."""


class CompactionConflict(StorageError):
    """The range changed (trim, another compactor) while it was being compacted, or the compaction lease was lost."""
