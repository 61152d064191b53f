#!/usr/bin/env bash
# Python clients the interop tests drive the gateway with: grpcio + grpcio-reflection (a
# generic gRPC client that knows nothing of our protos); and what the Python SDK (sdk/python)
# needs on the host: its dependencies (grpcio-status, protobuf; `mcp` comes with
# 45-mcp-clients.sh), pytest, mypy with the stubs it checks against, the pinned generator of
# its checked-in gRPC code (grpcio-tools), and a setuptools that builds its wheel offline.
# Installed into .deps/py, a venv ignored by git. Idempotent.
set -euo pipefail
repo=${OPENSHELL_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
venv=$repo/.deps/py
want="grpcio==1.85.* grpcio-reflection==1.85.* protobuf"
# Keep grpcio-tools in step with sdk/python/scripts/generate_proto.py (GENERATOR).
sdk="grpcio-status==1.85.* protobuf>=7.35.1,<8 grpcio-tools==1.85.1 pytest==9.* mypy==2.4.* types-protobuf types-grpcio setuptools>=77"
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
if ! "$venv/bin/python" - >/dev/null 2>&1 <<'EOF'
import grpc_status, grpc_tools, pytest, mypy, setuptools
from importlib.metadata import version
assert version("grpcio-tools") == "1.85.1"
assert tuple(int(p) for p in setuptools.__version__.split(".")[:2]) >= (77, 0)
EOF
then
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet --disable-pip-version-check $sdk
fi
