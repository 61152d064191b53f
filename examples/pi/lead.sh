#!/bin/sh
# Pi as a lead inside a sandbox: its MCP adapter reaches our tools through the door
# (http://openshell.local/mcp, nothing but the URL), its model is an OpenAI-compatible
# endpoint (here the scripted one, tests/interop/scripted_model.mjs, on the sandbox's own
# loopback). See docs/mcp-clients.md.
#
#     sh lead.sh PI_PREFIX [PROMPT]
#
# PI_PREFIX: where `npm install node@22 @earendil-works/pi-coding-agent@0.86.1
# pi-mcp-adapter@2.36.0` put them. The grant's program is that node, as the kernel reports it
# (readlink -f PI_PREFIX/node_modules/.bin/node).
set -eu
prefix=$1
prompt=${2:-"Create a tool child named worker with the openshell_create_sandbox tool, then run echo hello from worker in it with openshell_exec. Both are reached through the mcp tool."}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$HOME/.pi/agent"
cp "$here/models.json" "$here/mcp.json" "$HOME/.pi/agent/"
exec "$prefix/node_modules/.bin/node" "$prefix/node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js" \
    --no-session -e "$prefix/node_modules/pi-mcp-adapter" --model scripted/scripted -p "$prompt"
