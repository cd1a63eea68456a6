"""A replicated WAL on the brokers' local disks, in front of the object store.

Each broker runs a replica (``WalServer`` over a ``WalStore``): append, fence, read and
drop entries, each an encoded WAL object under its object name, grouped by the block of
names it was reserved in. A writer sends each flush to several replicas through
``WalReplicaClient``s and acknowledges once enough of them have it on disk.
"""

from .client import WalReplicaClient
from .errors import (
    BlockFenced,
    EntryNotFound,
    ProtocolError,
    ReplicaUnavailable,
    WalCorrupt,
    WalError,
    WalFull,
    WalUnauthorized,
)
from .server import WalServer
from .store import WalStore

__all__ = [
    "BlockFenced",
    "EntryNotFound",
    "ProtocolError",
    "ReplicaUnavailable",
    "WalCorrupt",
    "WalError",
    "WalFull",
    "WalReplicaClient",
    "WalServer",
    "WalStore",
    "WalUnauthorized",
]
