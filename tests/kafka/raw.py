"""A minimal blocking Kafka client for bad-input and protocol-level tests (built on the codec)."""

from __future__ import annotations

import datetime
import io
import socket
import struct

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as HeaderV1
from kio.schema.request_header.v2.header import RequestHeader as HeaderV2
from kio.serial import entity_reader, entity_writer

from nereus.codec.kafka import make, nested


class RawKafka:
    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.corr = 0

    @classmethod
    def over(cls, sock: socket.socket) -> "RawKafka":
        """A client on an already connected socket (a TLS one, for instance)."""
        client = cls.__new__(cls)
        client.sock, client.corr = sock, 0
        return client

    def close(self) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._read(4))[0]
        return self._read(size)

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return out

    def frame(self, api_key: int, version: int, **fields) -> bytes:
        """A whole request frame (size prefix included) under the next correlation id."""
        cls = load_request_schema(api_key, version)
        self.corr += 1
        buf = io.BytesIO()
        header_cls = HeaderV2 if cls.__flexible__ else HeaderV1
        entity_writer(header_cls)(buf, header_cls(request_api_key=api_key, request_api_version=version,
                                                  correlation_id=self.corr, client_id="raw"))
        entity_writer(cls)(buf, make(cls, **fields))
        body = buf.getvalue()
        return struct.pack(">i", len(body)) + body

    def request(self, api_key: int, version: int, **fields):
        self.sock.sendall(self.frame(api_key, version, **fields))
        frame = self.recv_frame()
        resp_cls = load_response_schema(api_key, version)
        corr = struct.unpack_from(">i", frame, 0)[0]
        assert corr == self.corr
        pos = 4 + (1 if resp_cls.__flexible__ and api_key != 18 else 0)  # empty tagged fields
        return entity_reader(resp_cls)(frame, pos)[0]

    def produce(self, topic: str, partition: int, records: bytes, acks: int = -1, version: int = 9):
        cls = load_request_schema(0, version)
        pdata = nested(cls, "PartitionProduceData")(index=partition, records=records)
        tdata = nested(cls, "TopicProduceData")(name=topic, partition_data=(pdata,))
        resp = self.request(0, version, transactional_id=None, acks=acks,
                            timeout=datetime.timedelta(seconds=10), topic_data=(tdata,))
        return resp.responses[0].partition_responses[0]

    def metadata(self, topics: list[str] | None, version: int = 9):
        cls = load_request_schema(3, version)
        req_topics = None if topics is None else tuple(
            make(nested(cls, "MetadataRequestTopic"), name=t, topic_id=None) for t in topics)
        return self.request(3, version, topics=req_topics, allow_auto_topic_creation=True,
                            include_cluster_authorized_operations=False, include_topic_authorized_operations=False)

    def fetch(self, topic: str, partition: int, offset: int, version: int = 12, max_wait_ms: int = 0):
        """One partition's FetchResponse data (fetching ``offset``)."""
        cls = load_request_schema(1, version)
        part = make(nested(cls, "FetchPartition"), partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                    last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)
        req_topic = make(nested(cls, "FetchTopic"), topic=topic, partitions=(part,))
        resp = self.request(1, version, cluster_id=None, replica_id=-1,
                            max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=1, max_bytes=1 << 20,
                            isolation_level=0, session_id=0, session_epoch=-1, topics=(req_topic,),
                            forgotten_topics_data=(), rack_id="")
        return resp.responses[0].partitions[0]
