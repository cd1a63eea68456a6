"""Oxia's client protocol: ``client.proto``, its generated messages ``client_pb2``
(checked in, so run time needs only ``protobuf``), and ``service`` (the gRPC stub
and server registration, built from the service descriptor).

Regenerate the messages after editing the .proto (``dev`` extra), from the repo root::

    .venv/bin/python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. nereus/meta/oxia/proto/client.proto
"""
