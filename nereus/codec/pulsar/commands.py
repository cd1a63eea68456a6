"""Wrap sub-commands in BaseCommand and find them again.

In the protocol each sub-command's field number in BaseCommand equals its
``BaseCommand.Type`` value, so both directions are table look-ups built once
from the generated descriptor rather than a hand-kept list.
"""

from __future__ import annotations

from google.protobuf.message import Message

from . import PulsarApi_pb2 as pb

BaseCommand = pb.BaseCommand
Type = pb.BaseCommand.Type

# type value -> BaseCommand field name holding that sub-command
FIELD_BY_TYPE: dict[int, str] = {}
# sub-command message full name -> (type value, field name)
_BY_MESSAGE: dict[str, tuple[int, str]] = {}

for _field in BaseCommand.DESCRIPTOR.fields:
    if _field.message_type is None:
        continue
    # Fails at import if the .proto ever breaks the number == type rule.
    assert _field.number in Type.values(), _field.name
    FIELD_BY_TYPE[_field.number] = _field.name
    _BY_MESSAGE[_field.message_type.full_name] = (_field.number, _field.name)
del _field

# Sub-commands without fields: a peer may omit the empty sub-message.
EMPTY_BODY_TYPES = frozenset({Type.Value("PING"), Type.Value("PONG")})


def wrap(sub: Message) -> pb.BaseCommand:
    """Return a BaseCommand with ``type`` set and ``sub`` as its sub-command."""
    try:
        type_value, field = _BY_MESSAGE[sub.DESCRIPTOR.full_name]
    except KeyError:
        raise TypeError(f"{sub.DESCRIPTOR.full_name} is not a BaseCommand sub-command") from None
    command = BaseCommand(type=type_value)
    getattr(command, field).CopyFrom(sub)
    return command


def body(command: pb.BaseCommand) -> Message:
    """Return the sub-command selected by ``command.type``."""
    return getattr(command, FIELD_BY_TYPE[command.type])


def type_name(type_value: int) -> str:
    """Name of a BaseCommand type value, or ``UNKNOWN(n)``."""
    try:
        return Type.Name(type_value)
    except ValueError:
        return f"UNKNOWN({type_value})"
