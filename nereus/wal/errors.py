"""Errors of the WAL replicas, named after the state they report (store, server and client alike)."""


class WalError(Exception):
    """Root of every WAL replica error."""


class BlockFenced(WalError):
    """The block was fenced (or dropped) on this replica: it takes no more appends."""


class EntryNotFound(WalError):
    """This replica holds no entry under that key."""


class WalFull(WalError):
    """The replica's directory reached its size limit or its disk is full."""


class WalCorrupt(WalError):
    """The entry's bytes on disk fail their checksum: it is not served."""


class ReplicaUnavailable(WalError):
    """The replica could not be reached, or did not answer in time."""


class WalUnauthorized(ReplicaUnavailable):
    """The replica refused this client's credentials, or wants some it was not given."""


class ProtocolError(WalError):
    """Bytes that are not a valid frame of the replica protocol."""
