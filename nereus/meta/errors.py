"""Errors of the metadata plane, named after the state they report."""


class MetadataError(Exception):
    """Root of every metadata-plane error."""


class UnexpectedVersion(MetadataError):
    """A conditional write found another version (or presence) than it expected."""


class KeyNotFound(MetadataError):
    """The record does not exist."""


class SessionNotFound(MetadataError):
    """The session this ephemeral write relies on has expired or was closed."""


class InvalidRequest(MetadataError):
    """The request is malformed (bad key, bad options combination, oversized value)."""


class NamespaceNotFound(MetadataError):
    """The namespace does not exist on this metadata service."""


class MetadataClosed(MetadataError):
    """The client or engine was closed."""


class MetadataUnavailable(MetadataError):
    """The metadata service cannot be reached or failed to persist the write."""
