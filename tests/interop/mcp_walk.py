"""The acceptance walk through MCP with the official Python SDK (`mcp` on PyPI), unchanged.

    mcp_walk.py URL PHASE [--token-env VAR] [--mode legacy|auto] [--parent NAME]

From the host the token comes from the environment variable VAR (never argv); through the
door (http://openshell.local/mcp inside a sandbox) there is none. PHASE `first` runs up to
the refusal for a limit; the caller then raises the grant's limit (no policy change) and
runs PHASE `after_raise`. Each phase checks what it sees (exit 1 with the reason) and
prints one JSON object of what it found.
"""

import argparse
import asyncio
import base64
import json
import os
import secrets
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

TOOLS = {
    "create_sandbox", "exec", "list_children", "get_sandbox", "stop_sandbox", "delete_sandbox",
    "update_child_policy", "get_grant", "check_policy", "get_file",
}

# Wider than any parent in the tests: network access to a host nobody granted.
WIDER = """version: 1
filesystem_policy:
  read_only: [/usr, /lib, /proc, /dev/urandom, /etc]
  read_write: [/tmp]
network_policies:
  anywhere:
    endpoints:
      - host: example.com
        port: 443
    binaries:
      - path: /usr/bin/curl
"""


def fail(why):
    print(json.dumps({"ok": False, "error": why}))
    sys.exit(1)


def check(cond, why):
    if not cond:
        fail(why)


async def call(client, name, args, progress=None):
    r = await client.call_tool(name, args, progress_callback=progress)
    return r.is_error, r.structured_content


async def read_file(client, sandbox, path):
    """get_file, waiting while the child has not written it yet (READY comes first; it renames each file into place, so one that exists is whole)."""
    for _ in range(100):
        err, got = await call(client, "get_file", {"sandbox": sandbox, "path": path})
        if not (err and got["code"] == "NOT_FOUND"):
            return err, got
        await asyncio.sleep(0.1)
    return err, got


async def agent_files(client, parent, found):
    """An agent child given a secret through env writes it and a binary file; the parent
    reads both with get_file (text as UTF-8, bytes as base64). A tool child's files and
    paths outside the child are refused."""
    secret = "walk-" + secrets.token_hex(16)
    script = ('printf "%s" "$WALK_SECRET" > .s && mv .s secret.txt; '
              'printf "\\377\\376\\000x" > .b && mv .b blob.bin; exec sleep 600')
    args = {"name": "walk-agent", "kind": "agent", "command": ["sh", "-c", script],
            "env": [{"name": "WALK_SECRET", "value": secret}], "request_id": "walk-agent"}
    if parent:
        args["parent"] = parent
    err, created = await call(client, "create_sandbox", args)
    check(not err and created["sandbox"]["phase"] == "READY", f"agent child: {created}")
    found["secret"] = secret

    err, text = await read_file(client, "walk-agent", "secret.txt")
    check(not err and text["encoding"] == "utf-8" and text["content"] == secret, f"get_file text: {text}")
    check(text["size"] == len(secret) and text["path"].endswith("secret.txt"), f"get_file text: {text}")
    err, blob = await read_file(client, "walk-agent", "blob.bin")
    check(not err and blob["encoding"] == "base64", f"get_file binary: {blob}")
    check(base64.b64decode(blob["content"]) == b"\xff\xfe\x00x" and blob["size"] == 4, f"get_file bytes: {blob}")
    found["file"] = text

    err, out = await call(client, "get_file", {"sandbox": "walk-agent", "path": "../../../etc/passwd"})
    check(err and out["code"] in ("INVALID_ARGUMENT", "NOT_ALLOWED"), f"a path outside the child: {out}")
    found["outside"] = out
    err, big = await call(client, "get_file", {"sandbox": "walk-agent", "path": "secret.txt", "max_bytes": 4})
    check(err and big["code"] == "LIMIT_REACHED", f"over max_bytes: {big}")
    err, bad = await call(client, "get_file", {"sandbox": "walk-agent", "path": "secret.txt", "max_bytes": 1 << 40})
    check(err and bad["code"] == "INVALID_ARGUMENT" and bad["details"]["field"] == "max_bytes", f"max_bytes: {bad}")

    err, owned = await call(client, "create_sandbox", {**args, "name": "walk-home", "request_id": "walk-home",
                                                       "env": [{"name": "HOME", "value": secret}]})
    check(err and owned["code"] == "INVALID_ARGUMENT" and owned["details"]["field"] == "env", f"env HOME: {owned}")
    check(secret not in json.dumps(owned), f"the refusal shows no value: {owned}")


async def first(client, parent, found):
    tools = (await client.list_tools()).tools
    names = {t.name for t in tools}
    check(TOOLS <= names, f"tools listed: {sorted(names)}")
    for t in tools:
        check(t.output_schema is not None, f"{t.name} has an output schema")
        check(t.annotations is not None, f"{t.name} has annotations")
    by_name = {t.name: t for t in tools}
    check(by_name["get_grant"].annotations.read_only_hint is True, "get_grant is read-only")
    check(by_name["delete_sandbox"].annotations.destructive_hint is True, "delete_sandbox is destructive")
    found["tools"] = sorted(names)

    err, grant = await call(client, "get_grant", {"sandbox": parent} if parent else {})
    check(not err, f"get_grant: {grant}")
    found["grant"] = grant

    err, verdict = await call(client, "check_policy", {"candidate": WIDER, **({"parent": parent} if parent else {})})
    check(not err and verdict["verdict"] == "exceeds" and verdict["counterexample"], f"check_policy: {verdict}")
    found["check_policy"] = verdict

    progress = []

    async def on_progress(p, total, message):
        progress.append(message)

    args = {"name": "walk-tool", "kind": "tool", "command": ["sleep", "600"], "request_id": "walk-1"}
    if parent:
        args["parent"] = parent
    err, created = await call(client, "create_sandbox", args, on_progress)
    check(not err, f"create_sandbox: {created}")
    check(created["sandbox"]["phase"] == "READY", f"created READY: {created}")
    check(created["replayed"] is False, f"first create is not a replay: {created}")
    found["created"] = created["sandbox"]
    found["progress"] = progress

    err, again = await call(client, "create_sandbox", args)
    check(not err and again["replayed"] is True, f"repeat request_id: {again}")
    check(again["sandbox"]["id"] == created["sandbox"]["id"], "the repeat returns the first child")

    err, tool_file = await call(client, "get_file", {"sandbox": "walk-tool", "path": "x"})
    check(err and tool_file["code"] == "NOT_ALLOWED", f"get_file of a tool child: {tool_file}")
    found["tool_file"] = tool_file

    await agent_files(client, parent, found)

    err, ran = await call(client, "exec", {"sandbox": "walk-tool", "command": ["sh", "-c", "cat; echo done >&2"],
                                           "stdin": "hello from mcp"})
    check(not err and ran["exit_code"] == 0 and ran["stdout"] == "hello from mcp", f"exec: {ran}")
    check(ran["stderr"].strip() == "done", f"exec stderr: {ran}")
    found["exec"] = ran

    wider = {"name": "walk-wide", "kind": "agent", "command": ["sleep", "600"], "policy": WIDER}
    if parent:
        wider["parent"] = parent
    err, refused = await call(client, "create_sandbox", wider)
    check(err and refused["code"] == "POLICY_EXCEEDS_PARENT", f"wider policy: {refused}")
    check(refused["details"].get("counterexample"), f"a counterexample: {refused}")
    found["wider"] = refused

    over = {"name": "walk-over", "kind": "tool", "command": ["sleep", "600"], "request_id": "walk-2"}
    if parent:
        over["parent"] = parent
    err, limited = await call(client, "create_sandbox", over)
    check(err and limited["code"] == "LIMIT_REACHED", f"over the limit: {limited}")
    found["limit"] = limited

    err, listed = await call(client, "list_children", {"sandbox": parent} if parent else {})
    check(not err and "walk-tool" in [s["name"] for s in listed["sandboxes"]], f"list_children: {listed}")

    err, bad = await call(client, "create_sandbox", {"command": "not a list", **({"parent": parent} if parent else {})})
    check(err and bad["code"] == "INVALID_ARGUMENT" and bad["details"]["field"] == "command", f"bad input: {bad}")


async def after_raise(client, parent, found):
    over = {"name": "walk-over", "kind": "tool", "command": ["sleep", "600"], "request_id": "walk-2"}
    if parent:
        over["parent"] = parent
    err, created = await call(client, "create_sandbox", over)
    check(not err and created["sandbox"]["phase"] == "READY", f"after the raise: {created}")
    found["created"] = created["sandbox"]
    err, got = await call(client, "get_sandbox", {"sandbox": "walk-over"})
    check(not err and got["sandbox"]["id"] == created["sandbox"]["id"], f"get_sandbox: {got}")
    err, stopped = await call(client, "stop_sandbox", {"sandbox": "walk-over"})
    check(not err and [s["phase"] for s in stopped["stopped"]] == ["STOPPED"], f"stop_sandbox: {stopped}")


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("phase", choices=["first", "after_raise"])
    ap.add_argument("--token-env")
    ap.add_argument("--mode", default="legacy")
    ap.add_argument("--parent")
    a = ap.parse_args()
    headers = {}
    if a.token_env:
        headers["Authorization"] = "Bearer " + os.environ[a.token_env]
    http = create_mcp_http_client(headers=headers)
    found = {"ok": True, "mode": a.mode}
    async with http:
        async with Client(streamable_http_client(a.url, http_client=http), mode=a.mode) as client:
            await (first if a.phase == "first" else after_raise)(client, a.parent, found)
    print(json.dumps(found))


asyncio.run(main())
