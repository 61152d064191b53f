"""``AsyncSandboxClient``: every call, over whichever transport fits where it runs.

On the host it speaks gRPC with the user's login; inside a sandbox, MCP through the door.
Arguments are checked here (so a mistake is named before anything is sent), every create
carries a ``request_id`` (one is made when none is given, so the SDK's own retries are safe),
and a call refused for the tree's rate is retried after the ``retry_after_ms`` the gateway
gave, within ``rate_limit_wait`` seconds (a refused call did nothing).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Literal, TypeVar

from ._transport import CreateRequest, ExecRequest, GrantChange, Place, Transport
from .config import DOOR_URL, SandboxIdentity, host_config, sandbox_identity
from .errors import InvalidArgument, LimitReached, NotReady
from .types import ExecResult, File, Grant, GrantSpec, PolicyCheck, Sandbox, Template, WhoAmI

__all__ = ["AsyncSandboxClient"]

T = TypeVar("T")
# `list` is also a method name in the class below.
SandboxList = list[Sandbox]
TransportChoice = Literal["auto", "grpc", "door"]


def _invalid(field: str, why: str) -> InvalidArgument:
    return InvalidArgument(f"{field}: {why}", details={"field": field})


def _command(command: Sequence[str], field: str = "command") -> list[str]:
    if isinstance(command, (str, bytes)):
        raise _invalid(field, "a list of strings (the program and its arguments), not one string")
    out = list(command)
    if not out:
        raise _invalid(field, "must name a program")
    if not all(isinstance(a, str) for a in out):
        raise _invalid(field, "every argument must be a string")
    return out


def _name(value: str | None, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise _invalid(field, "a non-empty name or id")
    return value


def _ref(value: str | Sandbox, field: str = "sandbox") -> str:
    if isinstance(value, Sandbox):
        return value.id
    if not isinstance(value, str) or not value:
        raise _invalid(field, "a sandbox name, id or Sandbox")
    return value


def _env(env: Mapping[str, str] | None) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise _invalid("env", "a mapping of variable names to values")
    out: dict[str, str] = {}
    for k, v in env.items():
        # The value may be a secret: the error names the variable only.
        if not isinstance(k, str) or not isinstance(v, str):
            raise _invalid(f"env.{k}" if isinstance(k, str) else "env", "names and values must be strings")
        out[k] = v
    return out


def _positive(value: float | int | None, field: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise _invalid(field, "a positive number")


class AsyncSandboxClient:
    """The OpenShell delegation gateway, from the host or from inside a sandbox.

    ``AsyncSandboxClient()`` picks its transport from where it runs: inside a sandbox (its
    supervisor set ``OPENSHELL_SANDBOX_ID``) the door at ``http://openshell.local/mcp``; on
    the host gRPC, with ``endpoint``/``token`` or ``OPENSHELL_ENDPOINT``/``OPENSHELL_TOKEN``
    or the CLI's config file. Passing ``endpoint`` or ``token`` always means gRPC.

    Use it as ``async with AsyncSandboxClient() as client:``, or call ``await client.close()``.
    """

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        token: str | None = None,
        transport: TransportChoice = "auto",
        door_url: str = DOOR_URL,
        timeout: float = 60.0,
        ready_timeout: float = 300.0,
        rate_limit_wait: float = 30.0,
    ) -> None:
        _positive(timeout, "timeout")
        _positive(ready_timeout, "ready_timeout")
        if isinstance(rate_limit_wait, bool) or not isinstance(rate_limit_wait, (int, float)) or rate_limit_wait < 0:
            raise _invalid("rate_limit_wait", "seconds, zero or more")
        if transport not in ("auto", "grpc", "door"):
            raise _invalid("transport", "auto, grpc or door")
        self._ready_timeout = ready_timeout
        self._rate_limit_wait = rate_limit_wait
        me = sandbox_identity()
        use_door = transport == "door" or (transport == "auto" and me is not None and endpoint is None and token is None)
        self._transport: Transport
        if use_door:
            from ._door import DoorTransport

            self._transport = DoorTransport(door_url, me or SandboxIdentity(id="", name=""), timeout)
        else:
            from ._grpc import GrpcTransport

            self._transport = GrpcTransport(host_config(endpoint, token), timeout)

    def __repr__(self) -> str:
        return f"AsyncSandboxClient({self._transport!r})"

    @property
    def place(self) -> Place:
        """``"host"`` (gRPC with a login) or ``"sandbox"`` (MCP through the door)."""
        return self._transport.place

    async def __aenter__(self) -> AsyncSandboxClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._transport.close()

    async def _paced(self, call: Callable[[], Awaitable[T]]) -> T:
        """``call``, again after the wait a rate refusal names, within ``rate_limit_wait``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._rate_limit_wait
        while True:
            try:
                return await call()
            except LimitReached as e:
                # Only a rate refusal names a wait; it did nothing, so the call can go again.
                wait = e.retry_after_ms
                if wait is None or loop.time() + wait / 1000 > deadline:
                    raise
                # A little jitter, so a burst refused together does not come back together.
                await asyncio.sleep(wait / 1000 * (1 + random.random() / 4))

    async def create(
        self,
        command: Sequence[str],
        *,
        name: str | None = None,
        parent: str | Sandbox | None = None,
        kind: Literal["agent", "tool"] = "agent",
        policy: str | None = None,
        env: Mapping[str, str] | None = None,
        request_id: str | None = None,
        wait: bool = True,
        ready_timeout: float | None = None,
        grant: GrantSpec | None = None,
        template: Template | None = None,
    ) -> Sandbox:
        """Create a sandbox running ``command``; return it READY (or at admission, ``wait=False``).

        With ``parent`` (on the host) or inside a sandbox (its children are its own), a child
        within the tree's grant, its ``policy`` (YAML; the parent's when None) proved within
        its parent's. On the host without ``parent``, a root (lead), optionally with its
        ``grant`` and ``template``. A repeated ``request_id`` with the same arguments returns the
        first result (``replayed``) and creates nothing. A sandbox admitted but not READY raises
        ``NotReady``.
        """
        if kind not in ("agent", "tool"):
            raise _invalid("kind", "agent or tool")
        if request_id is not None and (not isinstance(request_id, str) or not request_id):
            raise _invalid("request_id", "a non-empty string")
        if policy is not None and not isinstance(policy, str):
            raise _invalid("policy", "the policy as YAML text")
        _positive(ready_timeout, "ready_timeout")
        parent_ref = None if parent is None else _ref(parent, "parent")
        if self.place == "host" and parent_ref is None:
            if kind != "agent":
                raise _invalid("kind", "a root is an agent; a tool child needs a parent")
        elif grant is not None and self.place == "host":
            raise _invalid("grant", "only a root takes a grant; change a tree's with update_grant")
        req = CreateRequest(
            command=_command(command),
            name=_name(name, "name"),
            parent=parent_ref,
            kind=kind,
            policy=policy,
            env=_env(env),
            request_id=request_id or f"sdk-{uuid.uuid4()}",
            wait=bool(wait),
            ready_timeout=ready_timeout or self._ready_timeout,
            grant=grant,
            template=template,
        )
        return await self._paced(lambda: self._transport.create(req))

    async def get(self, sandbox: str | Sandbox) -> Sandbox:
        ref = _ref(sandbox)
        return await self._paced(lambda: self._transport.get(ref))

    async def list(self, *, include_stopped: bool = False) -> SandboxList:
        """The caller's sandboxes, newest first on the host (a user's; an admin's: all); inside
        a sandbox, its own descendants. STOPPED and DELETED ones only with ``include_stopped``."""
        return await self._paced(lambda: self._transport.list_sandboxes(include_stopped))

    async def children(self, sandbox: str | Sandbox | None = None) -> SandboxList:
        """A sandbox first, then its descendants in tree order (inside: the caller's own tree
        when ``sandbox`` is None; on the host it is required)."""
        ref = None if sandbox is None else _ref(sandbox)
        if ref is None and self.place == "host":
            raise _invalid("sandbox", "required on the host: the sandbox whose tree to list")
        return await self._paced(lambda: self._transport.children(ref))

    async def watch(self, sandbox: str | Sandbox, *, timeout: float | None = None) -> AsyncGenerator[Sandbox, None]:
        """The sandbox now, then each change of its phase, ending at READY, ERROR, STOPPING,
        STOPPED or DELETED, or after ``timeout`` seconds (default ``ready_timeout``)."""
        ref = _ref(sandbox)
        _positive(timeout, "timeout")
        async for s in self._transport.watch(ref, timeout or self._ready_timeout):
            yield s

    async def wait_ready(self, sandbox: str | Sandbox, *, timeout: float | None = None) -> Sandbox:
        """Wait until the sandbox is READY and return it; ``NotReady`` if it failed, stopped, or
        was not READY within ``timeout`` seconds (default ``ready_timeout``)."""
        last = None
        async for s in self.watch(sandbox, timeout=timeout):
            last = s
        if last is None or last.phase != "READY":
            phase = "unknown" if last is None else last.phase
            name = _ref(sandbox) if last is None else last.name
            reason = "" if last is None else last.phase_reason
            raise NotReady(
                f"sandbox {name} is {phase}: {reason or 'not READY in time'}",
                details={"sandbox": name, "phase": phase, "reason": reason},
            )
        return last

    async def exec(
        self,
        sandbox: str | Sandbox,
        command: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        timeout_seconds: int | None = None,
    ) -> ExecResult:
        """Run ``command`` in the sandbox with its isolation; its exit code and output.

        On the host any sandbox of the user's; inside a sandbox, its own tool children."""
        if timeout_seconds is not None and (
            isinstance(timeout_seconds, bool) or not isinstance(timeout_seconds, int) or timeout_seconds <= 0
        ):
            raise _invalid("timeout_seconds", "a whole number of seconds, at least 1")
        if stdin is not None and not isinstance(stdin, (bytes, str)):
            raise _invalid("stdin", "bytes or text")
        req = ExecRequest(
            sandbox=_ref(sandbox),
            command=_command(command),
            stdin=stdin.encode("utf-8") if isinstance(stdin, str) else stdin,
            env=_env(env),
            workdir=workdir,
            timeout_seconds=timeout_seconds,
        )
        return await self._paced(lambda: self._transport.exec(req))

    async def stop(self, sandbox: str | Sandbox) -> SandboxList:
        """Stop the sandbox and its descendants; what was stopped, deepest first."""
        ref = _ref(sandbox)
        return await self._paced(lambda: self._transport.stop(ref, False))

    async def delete(self, sandbox: str | Sandbox) -> SandboxList:
        """Stop, then delete the sandbox and its descendants (frees their names; rows stay)."""
        ref = _ref(sandbox)
        return await self._paced(lambda: self._transport.stop(ref, True))

    async def get_file(self, sandbox: str | Sandbox, path: str, *, max_bytes: int | None = None) -> File:
        """A file of a running agent sandbox (inside: of an agent child), beneath its working
        directory or a read_write path of its policy. Larger than ``max_bytes`` is refused."""
        if not isinstance(path, str) or not path:
            raise _invalid("path", "a path in the sandbox")
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0):
            raise _invalid("max_bytes", "a whole number of bytes, at least 1")
        ref = _ref(sandbox)
        return await self._paced(lambda: self._transport.get_file(ref, path, max_bytes))

    async def get_grant(self, sandbox: str | Sandbox | None = None) -> Grant:
        """The grant of a sandbox's tree (inside: the caller's own when None)."""
        ref = None if sandbox is None else _ref(sandbox)
        if ref is None and self.place == "host":
            raise _invalid("sandbox", "required on the host: a sandbox of the tree")
        return await self._paced(lambda: self._transport.get_grant(ref))

    async def create_grant(self, sandbox: str | Sandbox, grant: GrantSpec) -> Grant:
        """Host only: give a tree (of a root or any sandbox in it) its grant."""
        if not isinstance(grant, GrantSpec):
            raise _invalid("grant", "a GrantSpec")
        ref = _ref(sandbox)
        return await self._transport.create_grant(ref, grant)

    async def update_grant(
        self,
        sandbox: str | Sandbox,
        *,
        max_depth: int | None = None,
        max_breadth: int | None = None,
        max_total: int | None = None,
        expires: str | datetime | None = None,
        program: str | None = None,
        tool_idle_seconds: int | None = None,
        rate: str | None = None,
    ) -> Grant:
        """Host only: change a live grant; applies from the next call."""
        if isinstance(expires, datetime):
            from ._grpc import expires_text

            try:
                expires = expires_text(expires)
            except ValueError:
                raise _invalid("expires", "a datetime with a time zone") from None
        change = GrantChange(max_depth, max_breadth, max_total, expires, program, tool_idle_seconds, rate)
        if all(v is None for v in vars(change).values()):
            raise _invalid("update_grant", "name at least one thing to change")
        ref = _ref(sandbox)
        return await self._transport.update_grant(ref, change)

    async def revoke_grant(self, sandbox: str | Sandbox) -> Grant:
        """Host only: end the tree's grant; nothing more is admitted in it."""
        ref = _ref(sandbox)
        return await self._transport.revoke_grant(ref)

    async def check_policy(
        self, candidate: str, *, boundary: str | None = None, parent: str | Sandbox | None = None
    ) -> PolicyCheck:
        """A dry run of the containment proof: whether ``candidate`` (YAML) fits within the
        ``boundary`` policy (YAML), or the boundary of ``parent``'s children (inside a sandbox,
        its own children's when neither is given). Creates nothing."""
        if not isinstance(candidate, str):
            raise _invalid("candidate", "the policy as YAML text")
        if boundary is not None and parent is not None:
            raise _invalid("boundary", "give parent or boundary, not both")
        if boundary is None and parent is None and self.place == "host":
            raise _invalid("parent", "required on the host (or a boundary): the sandbox the child would be under")
        parent_ref = None if parent is None else _ref(parent, "parent")
        return await self._paced(lambda: self._transport.check_policy(candidate, boundary, parent_ref))

    async def whoami(self) -> WhoAmI:
        """Who this client calls as: a user (host) or this sandbox (inside)."""
        return await self._transport.whoami()


def in_sandbox() -> bool:
    """Whether this process runs inside an OpenShell sandbox (its supervisor said so)."""
    return sandbox_identity() is not None
