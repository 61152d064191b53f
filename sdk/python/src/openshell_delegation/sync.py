"""``SandboxClient``: the blocking face of ``AsyncSandboxClient``, for scripts and threads.

Each call runs the async client's on an event loop of the client's own, in a daemon thread
(so a client left open never holds the interpreter at exit), and blocks until it is done.
Safe to call from several threads at once; calls then run concurrently on that loop.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import CancelledError
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from ._transport import Place
from .client import AsyncSandboxClient
from .types import Sandbox

__all__ = ["SandboxClient"]

P = ParamSpec("P")
R = TypeVar("R")


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="openshell-sdk", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except (KeyboardInterrupt, CancelledError):
            future.cancel()
            raise

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self.loop.close()


def _blocking(
    method: Callable[Concatenate[AsyncSandboxClient, P], Awaitable[R]],
) -> Callable[Concatenate[SandboxClient, P], R]:
    def call(self: SandboxClient, *args: P.args, **kwargs: P.kwargs) -> R:
        async def run() -> R:
            return await method(self._inner, *args, **kwargs)

        return self._loop.run(run())

    # help() and inspect show the async call's signature and documentation.
    return cast("Callable[Concatenate[SandboxClient, P], R]", functools.wraps(method)(call))


class SandboxClient:
    """The OpenShell delegation gateway, from the host or from inside a sandbox, blocking.

    Takes the arguments of ``AsyncSandboxClient`` and has its calls, each returning its
    result rather than an awaitable; ``watch`` is an iterator. Use it as
    ``with SandboxClient() as client:``, or call ``client.close()``.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        token: str | None = None,
        transport: str = "auto",
        door_url: str | None = None,
        timeout: float = 60.0,
        ready_timeout: float = 300.0,
        rate_limit_wait: float = 30.0,
    ) -> None:
        kwargs: dict[str, Any] = {"door_url": door_url} if door_url is not None else {}
        # Built first: a refusal (no token, a bad endpoint) leaves no thread behind.
        self._inner = AsyncSandboxClient(
            endpoint,
            token=token,
            transport=transport,  # type: ignore[arg-type]
            timeout=timeout,
            ready_timeout=ready_timeout,
            rate_limit_wait=rate_limit_wait,
            **kwargs,
        )
        self._loop = _Loop()
        self._closed = False

    def __repr__(self) -> str:
        return f"SandboxClient({self._inner._transport!r})"

    @property
    def place(self) -> Place:
        """``"host"`` (gRPC with a login) or ``"sandbox"`` (MCP through the door)."""
        return self._inner.place

    def __enter__(self) -> SandboxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.run(self._inner.close())
        finally:
            self._loop.stop()

    create = _blocking(AsyncSandboxClient.create)
    get = _blocking(AsyncSandboxClient.get)
    list = _blocking(AsyncSandboxClient.list)
    children = _blocking(AsyncSandboxClient.children)
    wait_ready = _blocking(AsyncSandboxClient.wait_ready)
    exec = _blocking(AsyncSandboxClient.exec)
    stop = _blocking(AsyncSandboxClient.stop)
    delete = _blocking(AsyncSandboxClient.delete)
    get_file = _blocking(AsyncSandboxClient.get_file)
    get_grant = _blocking(AsyncSandboxClient.get_grant)
    create_grant = _blocking(AsyncSandboxClient.create_grant)
    update_grant = _blocking(AsyncSandboxClient.update_grant)
    revoke_grant = _blocking(AsyncSandboxClient.revoke_grant)
    check_policy = _blocking(AsyncSandboxClient.check_policy)
    whoami = _blocking(AsyncSandboxClient.whoami)

    def watch(self, sandbox: str | Sandbox, *, timeout: float | None = None) -> Iterator[Sandbox]:
        """The sandbox now, then each change of its phase (see ``AsyncSandboxClient.watch``)."""
        phases = self._inner.watch(sandbox, timeout=timeout)

        async def next_phase() -> Sandbox:
            return await phases.__anext__()

        try:
            while True:
                try:
                    yield self._loop.run(next_phase())
                except StopAsyncIteration:
                    return
        finally:
            self._loop.run(phases.aclose())
