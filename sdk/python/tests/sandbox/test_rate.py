"""Inside a lead whose grant allows 2 door calls a second (tests/e2e/python_sdk.rs): a burst
is refused for rate with the wait the gateway names, and the SDK's pacing carries every call
of the same burst through by waiting that long (a call refused for rate did nothing)."""

import asyncio

from openshell_delegation import AsyncSandboxClient, LimitReached


async def burst(calls: int, wait: float) -> list[object]:
    async with AsyncSandboxClient(rate_limit_wait=wait) as c:
        return await asyncio.gather(*(c.get_grant() for _ in range(calls)), return_exceptions=True)


def test_a_burst_is_refused_for_rate_without_pacing():
    got = asyncio.run(burst(10, 0))
    refused = [r for r in got if isinstance(r, Exception)]
    assert refused, got
    assert all(isinstance(r, LimitReached) and r.limit == "rate" for r in refused), refused
    assert all(r.retry_after_ms and r.retry_after_ms > 0 for r in refused)
    assert len(refused) < len(got)


def test_the_sdk_paces_a_burst_through():
    got = asyncio.run(burst(10, 30))
    assert not [r for r in got if isinstance(r, Exception)], got
    assert {g.root for g in got} == {g.root for g in got[:1]}
