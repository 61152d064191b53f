"""An agent inside a sandbox creating its own child through the door: nothing but the URL.

Run by the sandbox's main command (the grant's program, /usr/bin/python3 with the `mcp`
package); its supervisor adds the sandbox identity and the calling program.
"""

import asyncio

from mcp import Client

DOOR = "http://openshell.local/mcp"


async def main():
    async with Client(DOOR) as mcp:
        grant = (await mcp.call_tool("get_grant", {})).structured_content
        print("may still create", grant["remaining"]["breadth"], "children")
        made = await mcp.call_tool("create_sandbox", {"name": "worker", "kind": "tool", "command": ["sleep", "600"]})
        print("worker:", made.structured_content["sandbox"]["phase"] if not made.is_error else made.structured_content)
        ran = await mcp.call_tool("exec", {"sandbox": "worker", "command": ["echo", "hello from worker"]})
        print(ran.structured_content["stdout"].strip())


asyncio.run(main())
