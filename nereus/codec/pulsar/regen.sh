#!/bin/sh
# Regenerate PulsarApi_pb2.py (+ .pyi stub) from PulsarApi.proto.
# Needs the `dev` extra (grpcio-tools); run from anywhere:
#   sh nereus/codec/pulsar/regen.sh        (PYTHON=.venv/bin/python to pick one)
# The output is checked in so that the runtime needs only `protobuf`.
# protoc runs from the repository root so the descriptor is registered as
# "nereus/codec/pulsar/PulsarApi.proto": a bare "PulsarApi.proto" could clash
# with another library's Pulsar descriptors in the shared default pool.
set -eu
root=$(cd "$(dirname "$0")/../../.." && pwd)
python=${PYTHON:-python3}
cd "$root"
"$python" -m grpc_tools.protoc -I. --python_out=. --pyi_out=. \
    nereus/codec/pulsar/PulsarApi.proto
