#!/usr/bin/env bash
# The official MCP clients the MCP tests drive the gateway with, unchanged: the Python SDK
# (`mcp` on PyPI) into the .deps/py venv made by 40-python.sh (host clients) and into
# /opt/openshell-test/py-sandbox, a venv of the system's /usr/bin/python3 that sandboxes can
# read and run (the interpreter a grant names; outside the checkout, which may sit under a /tmp
# that sandboxes do not see); the TypeScript SDK plus the official conformance suite
# (npm, into .deps/node), and again with Node 22 under /opt/openshell-test/node-sandbox for
# sandboxes; the MCP Inspector's CLI (its --strict schema check) into .deps/inspector; the
# conversions clients apply to tool schemas (the OpenAI Agents SDK, google-genai) and a JSON
# Schema validator into .deps/py; the agent frameworks the recipes in docs/mcp-clients.md
# run inside sandboxes (pydantic-ai, the OpenAI Agents SDK) into the sandboxes' venv, which
# also gets the Python SDK's (sdk/python) other dependencies and pytest, which its in-sandbox
# suite runs with. Idempotent.
set -euo pipefail
repo=${OPENSHELL_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
venv=$repo/.deps/py
node_dir=$repo/.deps/node
if ! "$venv/bin/python" -c 'import mcp' >/dev/null 2>&1; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'mcp==2.3.*'
fi
# Pinned together: each of these works with mcp 2.3.
frameworks=('pydantic-ai-slim[mcp]==2.68.0' 'openai-agents==0.24.0')
pip_has() { "$1/bin/python" - "${@:2}" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
sys.exit(any(version(n) != v for n, v in (a.split("==") for a in sys.argv[1:])))
PY
}
if ! pip_has "$venv" pydantic-ai-slim==2.68.0 openai-agents==0.24.0 google-genai==3.6.1 jsonschema==4.26.0; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check "${frameworks[@]}" 'google-genai==3.6.1' 'jsonschema==4.26.0'
fi
sandbox_venv=/opt/openshell-test/py-sandbox
mkdir -p /opt/openshell-test
chmod 755 /opt/openshell-test
if [ ! -x "$sandbox_venv/bin/python" ]; then
    /usr/bin/python3 -m venv "$sandbox_venv"
fi
if ! "$sandbox_venv/bin/python" -c 'import mcp, grpc, grpc_status, google.protobuf, pytest' >/dev/null 2>&1; then
    "$sandbox_venv/bin/pip" install --quiet --disable-pip-version-check 'mcp==2.3.*' \
        'grpcio==1.85.*' 'grpcio-status==1.85.*' 'protobuf>=7.35.1,<8' 'pytest==9.*'
fi
if ! pip_has "$sandbox_venv" pydantic-ai-slim==2.68.0 openai-agents==0.24.0; then
    "$sandbox_venv/bin/pip" install --quiet --disable-pip-version-check "${frameworks[@]}"
fi
chmod -R a+rX "$sandbox_venv"
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm
fi
want_sdk=1.32
want_conformance=0.1.16
have() { [ -f "$node_dir/node_modules/$1/package.json" ] && grep -q "\"version\": \"$2" "$node_dir/node_modules/$1/package.json"; }
if ! have @modelcontextprotocol/sdk "$want_sdk" || ! have @modelcontextprotocol/conformance "$want_conformance"; then
    mkdir -p "$node_dir"
    npm install --silent --no-audit --no-fund --prefix "$node_dir" \
        "@modelcontextprotocol/sdk@~$want_sdk" "@modelcontextprotocol/conformance@$want_conformance" >&2
fi
# The Inspector's CLI (Node 22.19 or newer: run with the runtime below).
want_inspector=2.12.0
inspector_dir=$repo/.deps/inspector
if ! [ -f "$inspector_dir/node_modules/@modelcontextprotocol/inspector/package.json" ] ||
    ! grep -q "\"version\": \"$want_inspector\"" "$inspector_dir/node_modules/@modelcontextprotocol/inspector/package.json"; then
    mkdir -p "$inspector_dir"
    npm install --silent --no-audit --no-fund --prefix "$inspector_dir" "@modelcontextprotocol/inspector@$want_inspector" >&2
fi
# The conformance suite needs Node 22 or newer (fs.globSync); Debian's is older. The `node`
# package on npm carries an official Node build: into .deps/node-runtime, used only for it.
runtime=$repo/.deps/node-runtime
if ! "$runtime/node_modules/.bin/node" --version 2>/dev/null | grep -q '^v22\.'; then
    mkdir -p "$runtime"
    npm install --silent --no-audit --no-fund --prefix "$runtime" node@22 >&2
fi
# The TypeScript SDK where sandboxes can read and run it (outside the checkout, like the
# Python venv above): Node 22 (the `node` package's official build, the grant's program for
# the TypeScript walk through the door) beside the SDK.
node_sandbox=/opt/openshell-test/node-sandbox
have_at() { [ -f "$node_sandbox/node_modules/$1/package.json" ] && grep -q "\"version\": \"$2" "$node_sandbox/node_modules/$1/package.json"; }
if ! have_at @modelcontextprotocol/sdk "$want_sdk" || ! "$node_sandbox/node_modules/.bin/node" --version 2>/dev/null | grep -q '^v22\.'; then
    mkdir -p "$node_sandbox"
    npm install --silent --no-audit --no-fund --prefix "$node_sandbox" node@22 "@modelcontextprotocol/sdk@~$want_sdk" >&2
fi
chmod -R a+rX "$node_sandbox"
# Pi (the coding agent) with pi-mcp-adapter, where sandboxes can run them (the recipe in
# docs/mcp-clients.md, and the pi-agent image's contents: docker/pi-agent/build.sh). The
# adapter's releases import the @earendil-works scope, so Pi comes from that scope too (the
# @mariozechner releases fail with "Cannot find module '@earendil-works/pi-coding-agent'");
# 2.36.0 wants pi-ai ^0.84.1 || ^0.85 || ^0.86, Pi 0.86.1 needs Node 22.19 or newer.
want_pi=0.86.1
want_adapter=2.36.0
pi_sandbox=/opt/openshell-test/pi-sandbox
have_pi() { [ -f "$pi_sandbox/node_modules/$1/package.json" ] && grep -q "\"version\": \"$2\"" "$pi_sandbox/node_modules/$1/package.json"; }
if ! have_pi @earendil-works/pi-coding-agent "$want_pi" || ! have_pi pi-mcp-adapter "$want_adapter" ||
    ! "$pi_sandbox/node_modules/.bin/node" --version 2>/dev/null | grep -q '^v22\.'; then
    mkdir -p "$pi_sandbox"
    npm install --silent --no-audit --no-fund --prefix "$pi_sandbox" node@22 \
        "@earendil-works/pi-coding-agent@$want_pi" "pi-mcp-adapter@$want_adapter" >&2
fi
chmod -R a+rX "$pi_sandbox"
