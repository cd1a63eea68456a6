"""Errors of the Pulsar listener."""


class ProtocolViolation(Exception):
    """The client broke the protocol (command out of order, unknown id): the connection is closed."""
