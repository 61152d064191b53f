"""An OpenAI Agents SDK agent inside a lead sandbox, delegating through the door.

Run inside a sandbox whose grant names /usr/bin/python3 (docs/mcp-clients.md):

    python3 openai_agents_lead.py

The model here is the SDK's own test model (agents.testing.ScriptedModel): it makes the tool
calls a real model would, in strict mode (every argument present, null for what it leaves
out), then reports what it saw. Swap in a real one with `Agent(model="gpt-5", ...)`.

Timeouts: the SDK waits 5 s for a tool result by default, less than a create_sandbox that
waits for its child to be READY (a container start, a slow host). Set
client_session_timeout_seconds (and the HTTP timeout) to a few minutes.
"""

import asyncio

from agents import Agent, Runner
from agents.mcp import MCPServerStreamableHttp
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

DOOR = "http://openshell.local/mcp"


def report(call):
    """The last turn: what the tools answered, as the model saw them."""
    seen = [item["output"] for item in call.input if isinstance(item, dict) and item.get("type") == "function_call_output"]
    strict = sum(bool(getattr(t, "strict_json_schema", False)) for t in call.tools)
    lines = [f"tools in strict mode: {strict} of {len(call.tools)}"] + [f"saw: {s}" for s in seen]
    return [assistant_message("\n".join(lines))]


MODEL = ScriptedModel(
    [
        [function_call("get_grant", {"sandbox": None}, call_id="c1")],
        [
            function_call(
                "create_sandbox",
                {
                    "parent": None,
                    "name": "worker",
                    "kind": "tool",
                    "command": ["sleep", "600"],
                    "policy": None,
                    "env": [{"name": "MODE", "value": "fast"}],
                    "request_id": "worker-1",
                    "wait": None,
                },
                call_id="c2",
            )
        ],
        [
            function_call(
                "exec",
                {
                    "sandbox": "worker",
                    "command": ["sh", "-c", "echo hello from worker in $MODE mode"],
                    "stdin": None,
                    "env": None,
                    "workdir": None,
                    "timeout_seconds": None,
                },
                call_id="c3",
            )
        ],
        [function_call("create_sandbox", {"name": "second", "kind": "tool", "command": ["true"]}, call_id="c4")],
        ModelStep.respond(report),
    ]
)


async def main():
    openshell = MCPServerStreamableHttp(
        params={"url": DOOR, "timeout": 30, "sse_read_timeout": 300},
        client_session_timeout_seconds=300,
        name="openshell",
    )
    async with openshell:
        agent = Agent(
            name="lead",
            model=MODEL,
            mcp_servers=[openshell],
            mcp_config={"convert_schemas_to_strict": True},
        )
        result = await Runner.run(agent, "Start a tool child named worker and run echo in it.")
        print(result.final_output)


asyncio.run(main())
