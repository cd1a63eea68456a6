"""StreamStorage: streams of records on the object WAL, indexed in the metadata plane."""

from .api import AppendResult, FetchedEntry, FetchResult, Stream
from .collector import GarbageCollector
from .errors import (AppendSessionLost, CorruptObject, InvalidAppend, InvalidStreamName, ObjectMissing, OffsetOutOfRange,
                     StorageError, StreamClosed, StreamExists, StreamFenced, StreamNotFound)
from .service import StorageOptions, StreamHandle, StreamStorage
from .wal_writer import WalOptions

__all__ = [
    "AppendResult", "AppendSessionLost", "CorruptObject", "FetchResult", "FetchedEntry", "GarbageCollector", "InvalidAppend",
    "InvalidStreamName", "ObjectMissing", "OffsetOutOfRange", "StorageError", "StorageOptions", "Stream",
    "StreamClosed", "StreamExists", "StreamFenced", "StreamHandle", "StreamNotFound", "StreamStorage",
    "WalOptions",
]
