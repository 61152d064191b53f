"""One create_sandbox through MCP with the official Python SDK, unchanged; prints the result.

    mcp_create.py URL NAME [--token-env VAR] [--parent NAME]
"""

import argparse
import asyncio
import json
import os

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("name")
    ap.add_argument("--token-env")
    ap.add_argument("--parent")
    a = ap.parse_args()
    headers = {"Authorization": "Bearer " + os.environ[a.token_env]} if a.token_env else {}
    args = {"name": a.name, "kind": "tool", "command": ["sleep", "600"]}
    if a.parent:
        args["parent"] = a.parent
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(a.url, http_client=http), mode="legacy") as client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            r = await client.call_tool("create_sandbox", args)
    print(json.dumps({"tools": tools, "is_error": r.is_error, "result": r.structured_content}))


asyncio.run(main())
