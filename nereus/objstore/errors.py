"""Errors of the object-store layer."""


class ObjectStoreError(Exception):
    """Root of every object-store error."""


class ObjectExists(ObjectStoreError):
    """put_if_absent found the key already taken."""


class ObjectNotFound(ObjectStoreError):
    """No object under that key."""


class InvalidRange(ObjectStoreError):
    """A ranged read asked for a negative or inverted range."""


class InvalidObjectKey(ObjectStoreError):
    """The key is empty, absolute, or escapes the store (``..``).

    Also: empty or ``.`` segments, backslashes, NUL, segments starting with the
    reserved ``.tmp-`` prefix, more than 1024 UTF-8 bytes.
    """


class UnsupportedStoreUrl(ObjectStoreError):
    """No backend handles this URL scheme, or the URL or its options are malformed."""
