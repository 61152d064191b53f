"""Every tool schema through the conversions real clients apply, and every result checked
against its tool's output schema. Run by tests/e2e/mcp_schemas.rs:

    mcp_schemas.py URL --token-env VAR --parent NAME

- OpenAI strict mode: the Agents SDK's own MCP conversion (`MCPUtil.to_function_tool` with
  `convert_schemas_to_strict=True`, which calls `ensure_strict_json_schema` and falls back
  to non-strict, silently, when that raises): each tool must come out strict.
- Gemini: the google-genai SDK's MCP conversion (`_mcp_utils.mcp_to_gemini_tool`, what
  `generate_content(tools=[session])` uses) into the single-`type` OpenAPI subset of
  function declarations: each tool must convert, keeping every property with one type,
  its description, its enum, and which are required.
- structuredContent: results and refusals of every tool, validated with `jsonschema`
  (Draft 2020-12) against the tool's outputSchema, and each refusal flagged isError.
- A strict-mode call: every property present, null for what is left out, as a model in
  strict mode sends them.

Prints one JSON line: {"strict": {...}, "gemini": {...}, "validated": {tool: [kinds]},
"problems": [...]}; the Rust test asserts on it.
"""

import argparse
import asyncio
import json
import logging
import os

import jsonschema
from agents.mcp import MCPServerStreamableHttp
from agents.mcp.util import MCPUtil
from google.genai import _mcp_utils
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

# The gateway's default sandbox policy, which children without one inherit from the root.
DEFAULT = """version: 1
filesystem_policy:
  include_workdir: true
  read_only: [/usr, /lib, /proc, /dev/urandom, /app, /etc, /var/log]
  read_write: [/tmp, /dev/null]
landlock: { compatibility: best_effort }
"""

problems: list[str] = []
validated: dict[str, list[str]] = {}


def openai_strict(tools, url, headers):
    server = MCPServerStreamableHttp(params={"url": url, "headers": headers}, name="openshell")
    out = {}
    for tool in tools:
        converted = MCPUtil.to_function_tool(tool, server, convert_schemas_to_strict=True)
        out[tool.name] = converted.strict_json_schema
        if not converted.strict_json_schema:
            problems.append(f"openai: {tool.name} fell back to non-strict")
    return out


def gemini(tools):
    out = {}
    for tool in tools:
        try:
            decl = _mcp_utils.mcp_to_gemini_tool(tool).function_declarations[0]
        except Exception as e:  # the conversion's own failure is the finding
            problems.append(f"gemini: {tool.name}: {e!r}")
            out[tool.name] = False
            continue
        params = decl.parameters
        schema = tool.input_schema
        source = schema.get("properties", {})
        got = params.properties or {}
        ok = set(got) == set(source)
        if not ok:
            problems.append(f"gemini: {tool.name} properties {sorted(got)} != {sorted(source)}")
        if sorted(params.required or []) != sorted(schema.get("required", [])):
            problems.append(f"gemini: {tool.name} required {params.required}")
            ok = False
        for name, prop in got.items():
            if prop.type is None:
                problems.append(f"gemini: {tool.name}.{name} has no single type")
                ok = False
            if source[name].get("description") and not prop.description:
                problems.append(f"gemini: {tool.name}.{name} lost its description")
                ok = False
            if name not in (schema.get("required") or []) and not prop.nullable:
                problems.append(f"gemini: optional {tool.name}.{name} is not nullable")
                ok = False
        kind = got.get("kind")
        if tool.name == "create_sandbox" and (kind is None or sorted(kind.enum or []) != ["agent", "tool"]):
            problems.append(f"gemini: create_sandbox.kind lost its enum: {kind}")
            ok = False
        out[tool.name] = ok
    return out


async def call(client, schemas, name, args, expect_error):
    """expect_error None: either (a result, or a refusal while waiting)."""
    r = await client.call_tool(name, args)
    content = r.structured_content
    label = "refusal" if r.is_error else "result"
    if expect_error is not None and bool(r.is_error) != expect_error:
        problems.append(f"{name} {args}: isError={r.is_error}, expected {expect_error}: {content}")
    try:
        jsonschema.validate(content, schemas[name], cls=jsonschema.Draft202012Validator)
        validated.setdefault(name, []).append(label)
    except jsonschema.ValidationError as e:
        problems.append(f"{name} {label} does not fit its output schema: {e.message} in {content}")
    return content


async def results(client, schemas, parent):
    c = lambda name, args, err=False: call(client, schemas, name, args, err)  # noqa: E731
    await c("create_sandbox", {"parent": parent, "name": "s-tool", "kind": "tool", "command": ["sleep", "600"]})
    # As a model in strict mode sends it: every property, null for what it leaves out.
    await c("create_sandbox", {"parent": parent, "name": "s-agent", "kind": None, "policy": None, "request_id": None,
                               "wait": None, "env": [{"name": "GREETING", "value": "hello"}],
                               "command": ["sh", "-c", 'printf "%s" "$GREETING" > note.txt; sleep 600']})
    await c("create_sandbox", {"parent": parent, "name": "s-over", "command": ["true"]}, True)  # breadth 2
    await c("create_sandbox", {"parent": parent, "command": ["true"], "env": [{"name": "HOME", "value": "x"}]}, True)
    await c("create_sandbox", {"parent": parent, "command": ["true"],
                               "env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, True)
    await c("exec", {"sandbox": "s-tool", "command": ["echo", "hi"], "stdin": None, "env": None, "workdir": None,
                     "timeout_seconds": None})
    await c("exec", {"sandbox": "nowhere", "command": ["true"]}, True)
    for _ in range(50):  # the agent child writes its file once running
        got = await c("get_file", {"sandbox": "s-agent", "path": "note.txt"}, None)
        if got.get("content") == "hello":
            break
        await asyncio.sleep(0.2)
    else:
        problems.append(f"get_file never read note.txt: {got}")
    await c("get_file", {"sandbox": "s-agent", "path": "../../etc/passwd"}, True)
    await c("get_file", {"sandbox": "s-agent", "path": "note.txt", "max_bytes": 9 << 20}, True)
    await c("list_children", {"sandbox": parent})
    await c("list_children", {"sandbox": "nowhere"}, True)
    await c("get_sandbox", {"sandbox": "s-tool"})
    await c("get_sandbox", {"sandbox": "nowhere"}, True)
    await c("get_grant", {"sandbox": parent})
    await c("get_grant", {"sandbox": None}, True)  # a user has no sandbox of its own
    await c("check_policy", {"parent": parent, "candidate": "version: 1\n", "boundary": None})
    wide = "version: 1\nfilesystem_policy:\n  read_write: [/]\n"
    await c("check_policy", {"parent": parent, "candidate": wide})
    await c("check_policy", {"parent": parent, "boundary": "version: 1\n", "candidate": "version: 1\n"}, True)
    await c("update_child_policy", {"sandbox": "s-tool", "policy": DEFAULT})
    await c("update_child_policy", {"sandbox": "s-tool", "policy": wide}, True)
    await c("stop_sandbox", {"sandbox": "s-tool"})
    await c("stop_sandbox", {"sandbox": "nowhere"}, True)
    await c("delete_sandbox", {"sandbox": "s-agent"})
    await c("delete_sandbox", {"sandbox": "nowhere"}, True)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--token-env", required=True)
    ap.add_argument("--parent", required=True)
    a = ap.parse_args()
    headers = {"Authorization": "Bearer " + os.environ[a.token_env]}
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(a.url, http_client=http)) as client:
            tools = (await client.list_tools()).tools
            schemas = {t.name: t.output_schema for t in tools}
            strict = openai_strict(tools, a.url, headers)
            gem = gemini(tools)
            await results(client, schemas, a.parent)
    print(json.dumps({"strict": strict, "gemini": gem, "validated": validated, "problems": problems}))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main())
