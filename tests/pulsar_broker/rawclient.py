"""A minimal blocking Pulsar client built on nereus.codec.pulsar, to send what real clients never would."""

from __future__ import annotations

import socket

from nereus.codec.pulsar import FrameDecoder, encode_command, encode_payload_command, pb, type_name, wrap


class RawClient:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.decoder = FrameDecoder()

    def connect(self) -> pb.CommandConnected:
        self.send(wrap(pb.CommandConnect(client_version="raw-test", protocol_version=21)))
        return self.expect("CONNECTED")

    def send(self, command: pb.BaseCommand) -> None:
        self.sock.sendall(encode_command(command))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_message(self, producer_id: int, seq: int, payload: bytes, *, corrupt: bool = False,
                     batch_count: int | None = None) -> None:
        meta = pb.MessageMetadata(producer_name="raw", sequence_id=seq, publish_time=1)
        if batch_count is not None:  # claims a batch (real clients put that many messages in it)
            meta.num_messages_in_batch = batch_count
        parts = encode_payload_command(wrap(pb.CommandSend(producer_id=producer_id, sequence_id=seq)), meta, payload)
        data = b"".join(bytes(p) for p in parts)
        if corrupt:
            data = data[:-1] + bytes([data[-1] ^ 0xFF])
        self.sock.sendall(data)

    def read(self):
        """Next frame, or None when the server closed the connection."""
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                return frame
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.decoder.receive_data(data)

    def expect(self, name: str):
        while True:
            frame = self.read()
            assert frame is not None, f"connection closed while waiting for {name}"
            if type_name(frame.type) == name:
                return frame.body
            if type_name(frame.type) != "PING":
                raise AssertionError(f"expected {name}, got {type_name(frame.type)}: {frame.body}")

    def closed_by_server(self) -> bool:
        while True:
            frame = self.read()
            if frame is None:
                return True
            if type_name(frame.type) not in ("PING", "PONG"):
                return False

    def producer(self, topic: str, producer_id: int = 1, name: str | None = None) -> pb.CommandProducerSuccess:
        cmd = pb.CommandProducer(topic=topic, producer_id=producer_id, request_id=100 + producer_id)
        if name:
            cmd.producer_name = name
        self.send(wrap(cmd))
        return self.expect("PRODUCER_SUCCESS")

    def close(self) -> None:
        self.sock.close()
