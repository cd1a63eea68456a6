"""Sans-io codec for the Kafka wire protocol.

Requests/responses are ``kio`` schema objects (generated from Kafka's message
definitions); ``batch`` reads record batch v2 headers without decoding records;
``records`` decodes and builds records for the cross-protocol paths. No sockets.
"""

from .batch import BatchHeader, InvalidBatch, UnsupportedMagic, parse_header, split_batches, with_base_offset
from .protocol import (NO_THROTTLE, SUPPORTED, MalformedRequest, RequestHead, decode_request, encode_response, has,
                       make, nested, peek_head, response_schema, supported)

__all__ = ["BatchHeader", "InvalidBatch", "MalformedRequest", "NO_THROTTLE", "RequestHead", "SUPPORTED", "UnsupportedMagic",
           "decode_request", "encode_response", "has", "make", "nested", "parse_header", "peek_head",
           "response_schema", "split_batches", "supported", "with_base_offset"]
