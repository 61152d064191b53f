"""Create a child sandbox through MCP from the host, with the official Python SDK.

    OPENSHELL_TOKEN=... python examples/mcp_from_host.py http://127.0.0.1:7570/mcp lead

Your login goes in the Authorization header (never in the URL). The child is a tool
sandbox under `lead`; the script waits until it is READY (printing progress), runs a
command in it, and prints what the tree's grant has left.
"""

import asyncio
import os
import sys

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

URL, PARENT = sys.argv[1], sys.argv[2]


async def main():
    login = {"Authorization": "Bearer " + os.environ["OPENSHELL_TOKEN"]}
    async with create_mcp_http_client(headers=login) as http:
        async with Client(streamable_http_client(URL, http_client=http)) as mcp:

            async def progress(done, total, message):
                print("  ...", message)

            made = await mcp.call_tool(
                "create_sandbox",
                {"parent": PARENT, "name": "helper", "kind": "tool", "command": ["sleep", "600"],
                 "request_id": "example-helper"},
                progress_callback=progress,
            )
            if made.is_error:
                sys.exit(f"refused: {made.structured_content}")
            print("created", made.structured_content["sandbox"]["name"], made.structured_content["sandbox"]["phase"])

            ran = await mcp.call_tool("exec", {"sandbox": "helper", "command": ["uname", "-s"]})
            print("helper says", ran.structured_content["stdout"].strip())

            grant = (await mcp.call_tool("get_grant", {"sandbox": PARENT})).structured_content
            print("remaining under", PARENT, grant["remaining"])


asyncio.run(main())
