"""A pydantic-ai agent inside a lead sandbox, delegating through the door: nothing but the URL.

Run inside a sandbox whose grant names /usr/bin/python3 (docs/mcp-clients.md):

    python3 pydantic_ai_lead.py [--tool-error-behavior failed|retry]

The model here is scripted (pydantic-ai's FunctionModel): it calls the tools a real model
would, in order, and ends by reporting what it saw. Swap in a real model with
`Agent("openai:gpt-5", toolsets=[openshell])`.

Refusals (a limit, a wider policy) come back as MCP tool errors. With
`tool_error_behavior="failed"` the model sees each one and can adapt; with the default
`"retry"`, pydantic-ai asks the model to retry, and a second refusal of the same call ends
the run with UnexpectedModelBehavior.
"""

import argparse
import asyncio

from pydantic_ai import Agent
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

DOOR = "http://openshell.local/mcp"

# What the scripted model does, one tool call a turn; the grant allows one child.
PLAN = [
    ("get_grant", {}),
    ("create_sandbox", {"name": "worker", "kind": "tool", "command": ["sleep", "600"]}),
    ("exec", {"sandbox": "worker", "command": ["echo", "hello from worker"]}),
    ("create_sandbox", {"name": "second", "kind": "tool", "command": ["sleep", "600"]}),
]


def scripted(messages: list, info: AgentInfo) -> ModelResponse:
    last = messages[-1].parts[-1] if isinstance(messages[-1], ModelRequest) else None
    turns = sum(isinstance(m, ModelResponse) for m in messages)
    if getattr(last, "outcome", None) == "retried":
        # Asked to retry, as a model corrects itself: the same call again.
        name, args = PLAN[turns - 1]
        return ModelResponse(parts=[ToolCallPart(name, args)])
    if turns < len(PLAN):
        name, args = PLAN[turns]
        return ModelResponse(parts=[ToolCallPart(name, args)])
    seen = [f"{getattr(p, 'outcome', p.part_kind)}: {p.content}" for m in messages if isinstance(m, ModelRequest) for p in m.parts if p.part_kind != "user-prompt"]
    return ModelResponse(parts=[TextPart("\n".join(f"saw: {s}" for s in seen))])


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool-error-behavior", choices=["failed", "retry"], default="failed")
    a = ap.parse_args()
    # A create waits for the child to be READY: give reads more than the default.
    openshell = MCPToolset(DOOR, tool_error_behavior=a.tool_error_behavior, read_timeout=300)
    agent = Agent(FunctionModel(scripted), toolsets=[openshell])
    try:
        result = await agent.run("Start a tool child named worker, run echo in it, then try a second child.")
    except UnexpectedModelBehavior as e:
        print("run ended:", type(e).__name__, e)
        return
    print(result.output)


asyncio.run(main())
