"""One message as ``examine-message`` and ``get-message-by-id`` print it.

The REST answer carries the payload as its body and the metadata in ``X-Pulsar-*``
headers. Printed: the id, key, times, producer and properties, one per line, then the
payload as text when it is UTF-8, else as a hex dump (16 bytes a line).
"""

from __future__ import annotations

import click

_PREFIX = "x-pulsar-"
_PROPERTY = "x-pulsar-property-"
#: Headers shown first, in this order, with these labels; the others follow as they came.
_LABELS = (("message-id", "Message ID"), ("partition-key", "Key"), ("ordering-key", "Ordering key"),
           ("publish-time", "Publish time"), ("event-time", "Event time"), ("deliver-at-time", "Deliver at"),
           ("producer-name", "Producer"), ("sequence-id", "Sequence id"), ("num-batch-message", "Batch messages"),
           ("schema-version", "Schema version"), ("null-value", "Null value"))
_WIDTH = 16


def hex_dump(data: bytes) -> list[str]:
    """``offset  hex bytes  printable`` lines."""
    lines = []
    for start in range(0, len(data), _WIDTH):
        chunk = data[start:start + _WIDTH]
        shown = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{start:08x}  {chunk.hex(' '):<{_WIDTH * 3 - 1}}  {shown}")
    return lines


def lines(headers: dict[str, str], payload: bytes) -> list[str]:
    """The printed lines of one message."""
    pulsar = {name.lower()[len(_PREFIX):]: value for name, value in headers.items()
              if name.lower().startswith(_PREFIX) and not name.lower().startswith(_PROPERTY)}
    properties = [(name[len(_PROPERTY):], value) for name, value in headers.items()
                  if name.lower().startswith(_PROPERTY)]
    rows = [(label, pulsar.pop(key)) for key, label in _LABELS if key in pulsar]
    rows += [(key, value) for key, value in pulsar.items() if key not in ("is-encrypted", "batch-size")
             or value not in ("false", "")]
    if properties:
        rows.append(("Properties", ", ".join(f"{k}={v}" for k, v in properties)))
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    rows.append(("Payload", f"{len(payload)} bytes, " + ("UTF-8 text" if text is not None else "hex")))
    width = max(len(label) for label, _ in rows) + 2
    out = [f"{label + ':':<{width}}{value}" for label, value in rows]
    if payload:
        out += text.splitlines() if text is not None else hex_dump(payload)
    return out


def show(headers: dict[str, str], payload: bytes) -> None:
    for line in lines(headers, payload):
        click.echo(line)


__all__ = ["hex_dump", "lines", "show"]
