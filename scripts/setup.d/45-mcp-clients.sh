#!/usr/bin/env bash
# The official MCP clients the MCP tests drive the gateway with, unchanged: the Python SDK
# (`mcp` on PyPI) into the .deps/py venv made by 40-python.sh (host clients) and into
# /opt/openshell-test/py-sandbox, a venv of the system's /usr/bin/python3 that sandboxes can
# read and run (the interpreter a grant names; outside the checkout, which may sit under a /tmp
# that sandboxes do not see); the TypeScript SDK plus the official conformance suite
# (npm, into .deps/node), and again with Node 22 under /opt/openshell-test/node-sandbox for
# sandboxes. Idempotent.
set -euo pipefail
repo=${OPENSHELL_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
venv=$repo/.deps/py
node_dir=$repo/.deps/node
if ! "$venv/bin/python" -c 'import mcp, httpx' >/dev/null 2>&1; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check 'mcp==2.3.*'
fi
sandbox_venv=/opt/openshell-test/py-sandbox
mkdir -p /opt/openshell-test
chmod 755 /opt/openshell-test
if [ ! -x "$sandbox_venv/bin/python" ]; then
    /usr/bin/python3 -m venv "$sandbox_venv"
fi
if ! "$sandbox_venv/bin/python" -c 'import mcp' >/dev/null 2>&1; then
    "$sandbox_venv/bin/pip" install --quiet --disable-pip-version-check 'mcp==2.3.*'
fi
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
