"""gRPC glue for Oxia's ``OxiaClient`` service, derived from the proto's service descriptor.

Instead of checked-in generated stubs, the client stub and the server's handler
table are built from ``client_pb2``'s descriptor: method names, streaming kinds and
message types all come from the one ``.proto``.
"""

from __future__ import annotations

from typing import Any

import grpc

from . import client_pb2

SERVICE = client_pb2.DESCRIPTOR.services_by_name["OxiaClient"]
SERVICE_NAME = SERVICE.full_name  # io.streamnative.oxia.proto.OxiaClient


def _message_class(descriptor) -> type:
    return getattr(client_pb2, descriptor.name)


def _kind(method) -> str:
    return f"{'stream' if method.client_streaming else 'unary'}_{'stream' if method.server_streaming else 'unary'}"


class OxiaClientStub:
    """One callable attribute per RPC, on any (sync or asyncio) gRPC channel."""

    def __init__(self, channel: Any) -> None:
        for method in SERVICE.methods:
            request, response = _message_class(method.input_type), _message_class(method.output_type)
            multicallable = getattr(channel, _kind(method))
            setattr(self, method.name, multicallable(
                f"/{SERVICE_NAME}/{method.name}",
                request_serializer=request.SerializeToString,
                response_deserializer=response.FromString,
            ))


def add_to_server(servicer: Any, server: Any) -> None:
    """Register ``servicer``'s coroutine methods (named as the RPCs) on a grpc.aio server.

    Every RPC of the service must be implemented: a missing one is a startup error,
    not a runtime surprise.
    """
    handlers = {}
    for method in SERVICE.methods:
        implementation = getattr(servicer, method.name, None)
        if implementation is None:
            raise TypeError(f"{type(servicer).__name__} does not implement {method.name}")
        request, response = _message_class(method.input_type), _message_class(method.output_type)
        make_handler = getattr(grpc, f"{_kind(method)}_rpc_method_handler")
        handlers[method.name] = make_handler(implementation, request_deserializer=request.FromString,
                                             response_serializer=response.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
