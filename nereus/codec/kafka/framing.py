"""Sans-io framing of a Kafka request stream: feed bytes with ``receive_data``, pull frames.

A frame is ``size i32 | size bytes``; ``next_request`` returns the ``size`` bytes. Received
chunks are kept as they came (immutable ``bytes``): a frame that lies inside one chunk is
handed out as a memoryview slice of it, so its bytes are never copied (and a view can never
be invalidated: nothing writes into a ``bytes``). Only a frame split across chunks is
joined, once. A size below ``MIN_REQUEST_SIZE`` (no room for a request header) or above
``max_size`` is a protocol error, after which every call raises it again.
"""

from __future__ import annotations

import struct

from ..chunks import ChunkQueue
from .schemas import MalformedRequest

_SIZE = struct.Struct(">i")
MIN_REQUEST_SIZE = 8  # api key, api version, correlation id


class FrameSizeError(MalformedRequest):
    """A frame's size prefix is out of bounds: the stream cannot be framed any further."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes (limit {limit})")
        self.size = size
        self.limit = limit


class RequestFramer:
    """Incremental framer of the requests a Kafka client sends."""

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size  # may be changed between reads (a dynamic broker config)
        self._queue = ChunkQueue()
        self._error: FrameSizeError | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames: after draining ``next_request``, those
        of an incomplete frame (what a frame read timeout watches)."""
        return self._queue.buffered

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes. Mutable buffers are copied (their owner may reuse them)."""
        self._queue.append(data)

    def next_request(self, *, allow_short: bool = False) -> memoryview | None:
        """The next complete frame without its size prefix, or None until more bytes come.

        ``allow_short``: sizes below MIN_REQUEST_SIZE are frames too (bare SASL tokens after a
        v0 SaslHandshake). Raises FrameSizeError.
        """
        if self._error is not None:
            raise self._error
        queue = self._queue
        if queue.buffered < 4:
            return None
        size = queue.peek(_SIZE)[0]
        if size < 0 or size > self.max_size or (size < MIN_REQUEST_SIZE and not allow_short):
            self._error = FrameSizeError(size, self.max_size)
            raise self._error
        if queue.buffered < 4 + size:
            return None
        queue.skip(4)
        return queue.take(size)

    def __iter__(self):
        """Every complete frame currently buffered (short frames refused)."""
        while (frame := self.next_request()) is not None:
            yield frame


__all__ = ["FrameSizeError", "MIN_REQUEST_SIZE", "RequestFramer"]
