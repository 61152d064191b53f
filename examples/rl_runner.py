"""An RL-runner-style fan-out with the Python SDK: start N tool sandboxes (environments) under
a tree's grant, run one episode command in each at once, collect the outputs, stop them all.

The same script runs from the host and from inside a lead sandbox:

    # on the host, under a lead you created with a grant (your login from OPENSHELL_TOKEN or
    # the CLI's config file)
    python examples/rl_runner.py --parent lead --workers 3
    # inside the lead, run by the grant's program (the SDK reaches the gateway through the
    # sandbox's door, with no credential)
    python3 rl_runner.py --workers 3

It prints one JSON object: each episode's exit code and output, and what was stopped. A
create the grant refuses (LimitReached: breadth or total) ends the fan-out there; the
episodes that did start still run and are stopped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from typing import Any

from openshell_delegation import AsyncSandboxClient, LimitReached, Sandbox

EPISODE = 'echo "episode $EPISODE on $(uname -n): reward $((EPISODE * EPISODE))"'


async def run(parent: str | None, workers: int) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    async with AsyncSandboxClient() as client:
        # One request_id per environment: a retry of this run's creates creates nothing twice.
        made = await asyncio.gather(
            *(
                client.create(
                    ["sleep", "600"],
                    name=f"env-{run_id}-{i}",
                    parent=parent,
                    kind="tool",
                    request_id=f"rl-{run_id}-{i}",
                )
                for i in range(workers)
            ),
            return_exceptions=True,
        )
        # Each environment keeps its episode number (the creates the grant refused leave gaps).
        envs: list[tuple[int, Sandbox]] = [(i, m) for i, m in enumerate(made) if isinstance(m, Sandbox)]
        refused = [m for m in made if isinstance(m, LimitReached)]
        failed = [m for m in made if isinstance(m, BaseException) and not isinstance(m, LimitReached)]
        try:
            if failed:
                raise failed[0]
            results = await asyncio.gather(
                *(client.exec(env, ["sh", "-c", EPISODE], env={"EPISODE": str(i)}) for i, env in envs)
            )
        finally:
            stopped = [s.name for _, env in envs for s in await client.stop(env)]
        return {
            "place": client.place,
            "episodes": [
                {"episode": i, "sandbox": env.name, "exit_code": r.exit_code, "output": r.stdout.strip()}
                for (i, env), r in zip(envs, results)
            ],
            "refused": [{"limit": e.limit, "max": e.max, "message": e.message} for e in refused],
            "stopped": stopped,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parent", help="the lead to fan out under (on the host; inside, the caller is the parent)")
    parser.add_argument("--workers", type=int, default=3, help="how many environments (default 3)")
    args = parser.parse_args()
    if args.workers < 1:
        parser.error("--workers must be at least 1")
    report = asyncio.run(run(args.parent, args.workers))
    print(json.dumps(report))
    sys.exit(0 if all(e["exit_code"] == 0 for e in report["episodes"]) else 1)


if __name__ == "__main__":
    main()
