#!/usr/bin/env bash
# Python clients the interop tests drive the gateway with: grpcio + grpcio-reflection (a
# generic gRPC client that knows nothing of our protos). Installed into .deps/py, a venv
# ignored by git. Idempotent.
set -euo pipefail
repo=${OPENSHELL_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
venv=$repo/.deps/py
want="grpcio==1.85.* grpcio-reflection==1.85.* protobuf"
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
fi
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import grpc, grpc_reflection, google.protobuf' >/dev/null 2>&1; then
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet --disable-pip-version-check $want
fi
