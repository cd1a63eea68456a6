"""The WAL replica protocol (sans-io): messages to frames and back, and errors to statuses.

Every message is one length-prefixed frame; all integers are big-endian::

    frame    := length u32 (of what follows) | body
    request  := op u8 | request_id u64 | fields
      APPEND := block str | key str | data (the rest of the frame)
      READ   := key str | start u64 | end u64 (all ones: to the end of the entry)
      FENCE  := block str          DROP := block str          BLOCKS, PING := (no fields)
      AUTH   := token (the rest of the frame: a broker's token)
    response := RESPONSE u8 | request_id u64 | status u8 | message str | count u32 | str * count
                | data (the rest of the frame)
    str      := length u16 | UTF-8

A replica of a cluster with authentication answers UNAUTHORIZED to every request but
PING and AUTH until an AUTH on the connection proved a superuser's token (with mutual TLS
the certificate is the proof instead). A client may send many requests before the first answer; the server answers each as it
completes, so responses come in any order and are matched by ``request_id``. A response
carries the names of FENCE (keys) and BLOCKS (blocks), the data of READ, and the message
of a failure. ``FrameDecoder`` is fed bytes as they arrive and hands out whole messages; a
frame that lies inside one received chunk is handed out as a view of it, not a copy.
"""

from __future__ import annotations

import enum
import struct
from collections import deque
from dataclasses import dataclass, field
from typing import Union

from .errors import BlockFenced, EntryNotFound, ProtocolError, WalCorrupt, WalError, WalFull, WalUnauthorized

MAX_FRAME_BYTES = 128 << 20
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_HEAD = struct.Struct(">IBQ")  # frame length, op, request id
_TO_THE_END = (1 << 64) - 1
_RESPONSE = 0x80


class Op(enum.IntEnum):
    APPEND = 1
    READ = 2
    FENCE = 3
    DROP = 4
    BLOCKS = 5
    PING = 6
    AUTH = 7


class Status(enum.IntEnum):
    OK = 0
    FENCED = 1
    NOT_FOUND = 2
    FULL = 3
    CORRUPT = 4
    ERROR = 5
    UNAUTHORIZED = 6


Data = bytes | memoryview


@dataclass(frozen=True, slots=True)
class Append:
    request_id: int
    block: str
    key: str
    data: Data | list[Data]


@dataclass(frozen=True, slots=True)
class Read:
    request_id: int
    key: str
    start: int = 0
    end: int | None = None


@dataclass(frozen=True, slots=True)
class Fence:
    request_id: int
    block: str


@dataclass(frozen=True, slots=True)
class Drop:
    request_id: int
    block: str


@dataclass(frozen=True, slots=True)
class Blocks:
    request_id: int


@dataclass(frozen=True, slots=True)
class Ping:
    request_id: int


@dataclass(frozen=True, slots=True)
class Auth:
    request_id: int
    token: Data = field(repr=False)


@dataclass(frozen=True, slots=True)
class Response:
    request_id: int
    status: Status = Status.OK
    message: str = ""
    names: tuple[str, ...] = ()
    data: Data = b""


Request = Union[Append, Read, Fence, Drop, Blocks, Ping, Auth]
Message = Union[Request, Response]
_OPS = {Append: Op.APPEND, Read: Op.READ, Fence: Op.FENCE, Drop: Op.DROP, Blocks: Op.BLOCKS, Ping: Op.PING,
        Auth: Op.AUTH}

_STATUS_OF_ERROR = ((BlockFenced, Status.FENCED), (EntryNotFound, Status.NOT_FOUND), (WalFull, Status.FULL),
                    (WalCorrupt, Status.CORRUPT), (WalUnauthorized, Status.UNAUTHORIZED))
_ERROR_OF_STATUS = {status: error for error, status in _STATUS_OF_ERROR}


def failure(request_id: int, exc: BaseException) -> Response:
    """The response that reports ``exc`` (the one place errors become statuses)."""
    status = next((s for error, s in _STATUS_OF_ERROR if isinstance(exc, error)), Status.ERROR)
    return Response(request_id, status, str(exc) or type(exc).__name__)


def raise_for(response: Response) -> Response:
    """``response`` if it is OK, else the store's error it reports (the one place statuses become errors)."""
    if response.status == Status.OK:
        return response
    raise _ERROR_OF_STATUS.get(response.status, WalError)(response.message)


def _str(value: str) -> bytes:
    raw = value.encode()
    if len(raw) > 0xFFFF:
        raise ValueError(f"a name is at most 65535 bytes of UTF-8, not {len(raw)}")
    return _U16.pack(len(raw)) + raw


def encode(message: Message) -> list[Data]:
    """The frame of ``message`` as chunks (data is referenced, not copied): write with ``writelines``."""
    tail: list[Data] = []
    if isinstance(message, Response):
        kind = _RESPONSE
        fields = bytes([message.status]) + _str(message.message) + _U32.pack(len(message.names))
        fields += b"".join(_str(name) for name in message.names)
        tail = [message.data]
    else:
        kind = _OPS[type(message)]
        if isinstance(message, Append):
            fields = _str(message.block) + _str(message.key)
            tail = list(message.data) if isinstance(message.data, list) else [message.data]
        elif isinstance(message, Read):
            end = _TO_THE_END if message.end is None else message.end
            fields = _str(message.key) + _U64.pack(message.start) + _U64.pack(end)
        elif isinstance(message, (Fence, Drop)):
            fields = _str(message.block)
        elif isinstance(message, Auth):
            fields = b""
            tail = [message.token]
        else:
            fields = b""
    length = _HEAD.size - 4 + len(fields) + sum(memoryview(chunk).nbytes for chunk in tail)
    if length + 4 > MAX_FRAME_BYTES:
        raise ValueError(f"a frame is at most {MAX_FRAME_BYTES} bytes, this one would be {length + 4}")
    return [_HEAD.pack(length, kind, message.request_id) + fields, *tail]


class _Fields:
    """Reads the fields of one frame body, each read checked against its end."""

    def __init__(self, body: memoryview, position: int) -> None:
        self.body = body
        self.position = position

    def take(self, size: int) -> memoryview:
        end = self.position + size
        if end > len(self.body):
            raise ProtocolError(f"frame truncated: a field needs {size} bytes at {self.position}, "
                                f"the frame has {len(self.body)}")
        view = self.body[self.position:end]
        self.position = end
        return view

    def u8(self) -> int:
        return self.take(1)[0]

    def u32(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def u64(self) -> int:
        return _U64.unpack(self.take(8))[0]

    def str(self) -> str:
        raw = self.take(_U16.unpack(self.take(2))[0])
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("a name is not valid UTF-8") from None

    def rest(self) -> memoryview:
        return self.take(len(self.body) - self.position)

    def done(self) -> None:
        if self.position != len(self.body):
            raise ProtocolError(f"{len(self.body) - self.position} bytes left over at the end of a frame")


def decode(body: memoryview) -> Message:
    """The message in one frame's body (the bytes after its length)."""
    fields = _Fields(body, 0)
    kind, request_id = fields.u8(), fields.u64()
    if kind == _RESPONSE:
        status = fields.u8()
        if status not in Status._value2member_map_:
            raise ProtocolError(f"unknown status {status}")
        message = fields.str()
        names = tuple(fields.str() for _ in range(fields.u32()))
        return Response(request_id, Status(status), message, names, fields.rest())
    if kind == Op.APPEND:
        return Append(request_id, fields.str(), fields.str(), fields.rest())
    if kind == Op.AUTH:
        return Auth(request_id, fields.rest())
    if kind == Op.READ:
        key, start, end = fields.str(), fields.u64(), fields.u64()
        result: Message = Read(request_id, key, start, None if end == _TO_THE_END else end)
    elif kind in (Op.FENCE, Op.DROP):
        block = fields.str()
        result = Fence(request_id, block) if kind == Op.FENCE else Drop(request_id, block)
    elif kind == Op.BLOCKS:
        result = Blocks(request_id)
    elif kind == Op.PING:
        result = Ping(request_id)
    else:
        raise ProtocolError(f"unknown op {kind}")
    fields.done()
    return result


class FrameDecoder:
    """Feed received bytes with ``receive_data``; take whole messages with ``next_message``.

    After a ``ProtocolError`` the stream cannot be resynchronised: every call raises it again.
    """

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._chunks: deque[bytes] = deque()
        self._head = 0  # bytes of _chunks[0] already handed out
        self._buffered = 0
        self._error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received and not yet handed out in a message."""
        return self._buffered

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Add received bytes (a mutable buffer is copied: callers reuse theirs)."""
        if data:
            data = data if type(data) is bytes else bytes(data)
            self._chunks.append(data)
            self._buffered += len(data)

    def next_message(self) -> Message | None:
        """The next whole message, or None until more bytes arrive."""
        if self._error is not None:
            raise self._error
        if self._buffered < 4:
            return None
        length = _U32.unpack(self._peek(4))[0]
        try:
            if length + 4 > self.max_frame_bytes:
                raise ProtocolError(f"frame of {length + 4} bytes exceeds the limit of {self.max_frame_bytes}")
            if length < _HEAD.size - 4:
                raise ProtocolError(f"frame of {length + 4} bytes is shorter than any message")
            if self._buffered < 4 + length:
                return None
            return decode(self._take(4 + length)[4:])
        except ProtocolError as exc:
            self._error = exc
            raise

    def __iter__(self):
        while (message := self.next_message()) is not None:
            yield message

    def _peek(self, size: int) -> bytes:
        first = self._chunks[0]
        if self._head + size <= len(first):
            return first[self._head:self._head + size]
        return bytes(self._take(size, consume=False))

    def _take(self, size: int, *, consume: bool = True) -> memoryview:
        first = self._chunks[0]
        if self._head + size <= len(first):
            view = memoryview(first)[self._head:self._head + size]
            if consume:
                self._advance(size)
            return view
        parts, needed, head = [], size, self._head
        for chunk in self._chunks:
            part = memoryview(chunk)[head:head + needed]
            parts.append(part)
            needed -= len(part)
            head = 0
            if not needed:
                break
        if consume:
            self._advance(size)
        return memoryview(b"".join(parts))

    def _advance(self, size: int) -> None:
        self._buffered -= size
        while size:
            room = len(self._chunks[0]) - self._head
            if size < room:
                self._head += size
                return
            size -= room
            self._chunks.popleft()
            self._head = 0
