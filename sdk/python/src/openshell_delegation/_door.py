"""The in-sandbox transport: MCP through the door (``http://openshell.local/mcp``, served by
the sandbox's supervisor through its egress proxy) with the official ``mcp`` SDK.

The door needs nothing but the URL: the supervisor attaches the sandbox's door credential and
the calling program, which the kernel reports. It serves the gateway's MCP tools, which are
what a sandbox may do; what only a user may do (roots, grant changes, listing a user's
sandboxes) is refused here before anything is sent (``HostOnly``). The calls MCP has no tool
for are made of the ones it has: ``watch`` polls ``get_sandbox``, ``list`` is the sandbox's
own descendants (``list_children``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mcp import Client, MCPError
from mcp.types import Implementation

from ._version import VERSION
from ._transport import CreateRequest, ExecRequest, GrantChange, Place
from .config import SandboxIdentity
from .errors import HostOnly, InvalidArgument, LimitReached, NotReady, OpenShellError, Unavailable, error_for
from .types import SETTLED, ExecResult, File, Grant, GrantSpec, Limits, PolicyCheck, Sandbox, WhoAmI, timestamp

# How often watch asks for the phase (each ask is a tool call, counted at the tree's rate).
POLL_SECONDS = 0.5


def sandbox_of(s: dict[str, Any], replayed: bool = False) -> Sandbox:
    return Sandbox(
        id=s["id"],
        name=s["name"],
        kind=s.get("kind", "agent"),
        phase=s["phase"],
        phase_reason=s.get("phase_reason", ""),
        parent=s.get("parent"),
        root=s.get("root", ""),
        depth=s.get("depth", 0),
        command=list(s.get("command", [])),
        created_by=s.get("created_by", ""),
        created_at=timestamp(s.get("created_at", "")),
        policy_version=s.get("policy_version", 0),
        policy_hash=s.get("policy_hash", ""),
        exit_code=s.get("exit_code"),
        replayed=replayed,
    )


def _limits(d: dict[str, Any] | None) -> Limits | None:
    if not d:
        return None
    return Limits(depth=d.get("depth", 0), breadth=d.get("breadth", 0), total=d.get("total", 0))


class _Session:
    """One MCP session for the transport's life, held open by a task of its own (the SDK's
    context must be entered and left by one task), shared by every call: calls run
    concurrently on it."""

    def __init__(self, url: str, timeout: float) -> None:
        self._url = url
        self._timeout = timeout
        self._task: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._client: Client | None = None
        self._error: BaseException | None = None

    async def _hold(self) -> None:
        try:
            client = Client(
                self._url,
                read_timeout_seconds=self._timeout,
                client_info=Implementation(name="openshell-delegation", version=VERSION),
            )
            async with client:
                self._client = client
                self._ready.set()
                await self._closing.wait()
        except BaseException as e:  # noqa: BLE001 - reported to the callers waiting on it
            self._error = e
        finally:
            self._client = None
            self._ready.set()

    async def client(self) -> Client:
        if self._task is None or (self._task.done() and not self._closing.is_set()):
            self._ready, self._error = asyncio.Event(), None
            self._task = asyncio.get_running_loop().create_task(self._hold())
        await self._ready.wait()
        if self._client is None:
            why = self._error
            self._task = None
            raise Unavailable(
                f"cannot reach the door at {self._url} ({type(why).__name__}: {why}); "
                "is this process inside an OpenShell sandbox?",
                details={"url": self._url},
            ) from None
        return self._client

    async def close(self) -> None:
        self._closing.set()
        if self._task is not None:
            with contextlib.suppress(BaseException):
                await self._task
            self._task = None


class DoorTransport:
    place: Place = "sandbox"

    def __init__(self, url: str, me: SandboxIdentity, timeout: float) -> None:
        self._url = url
        self._me = me
        self._timeout = timeout
        self._session = _Session(url, timeout)
        self._schemas: dict[str, dict[str, Any]] = {}

    def __repr__(self) -> str:
        return f"DoorTransport(url={self._url!r}, sandbox={self._me.name!r})"

    async def close(self) -> None:
        await self._session.close()

    async def _call(self, tool: str, args: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        for attempt in range(2):
            client = await self._session.client()
            try:
                result = await client.call_tool(tool, args, read_timeout_seconds=timeout or self._timeout)
            except MCPError as e:
                if attempt == 0 and "session terminated" in e.message.lower():
                    # The gateway closes idle sessions; the call never ran: open another.
                    await self._session.close()
                    self._session = _Session(self._url, self._timeout)
                    continue
                raise Unavailable(f"{tool}: the door answered MCP error {e.code}: {e.message}", details={
                    "tool": tool,
                    "mcp_code": e.code,
                }) from None
            except TimeoutError:
                raise Unavailable(f"{tool}: no answer through the door within {timeout or self._timeout} s",
                                  details={"tool": tool}) from None
            content = result.structured_content
            if result.is_error:
                if isinstance(content, dict) and isinstance(content.get("code"), str):
                    details = content.get("details")
                    raise error_for(content["code"], str(content.get("message", "")),
                                    details if isinstance(details, dict) else {})
                text = " ".join(getattr(c, "text", "") for c in result.content)
                raise OpenShellError(f"{tool}: {text or 'refused without a reason'}", code="UNKNOWN")
            if not isinstance(content, dict):
                raise OpenShellError(f"{tool}: the door returned no structured result", code="UNKNOWN")
            return content
        raise AssertionError("unreachable")

    async def _env_arg(self, tool: str, env: dict[str, str]) -> Any:
        """``env`` in the shape the tool's input schema takes: an object of names to values, or
        a list of ``{name, value}`` (read from the listing, so either works)."""
        if tool not in self._schemas:
            client = await self._session.client()
            try:
                listed = await client.list_tools()
            except MCPError as e:
                raise Unavailable(f"tools/list: MCP error {e.code}: {e.message}") from None
            self._schemas = {t.name: dict(t.input_schema or {}) for t in listed.tools}
        prop = self._schemas.get(tool, {}).get("properties", {}).get("env", {})
        if prop.get("type") == "array":
            return [{"name": k, "value": v} for k, v in env.items()]
        return env

    async def create(self, req: CreateRequest) -> Sandbox:
        if req.grant is not None:
            raise HostOnly("create(grant=...)", "a grant is the user's; a sandbox's children run under its tree's")
        if req.template is not None:
            raise HostOnly("create(template=...)", "children run on their parent's template through the door")
        args: dict[str, Any] = {
            "command": req.command,
            "kind": req.kind,
            "request_id": req.request_id,
            "wait": req.wait,
        }
        if req.parent is not None:
            args["parent"] = req.parent
        if req.name is not None:
            args["name"] = req.name
        if req.policy is not None:
            args["policy"] = req.policy
        if req.env:
            args["env"] = await self._env_arg("create_sandbox", req.env)
        timeout = req.ready_timeout + 15 if req.wait else None
        got = await self._call("create_sandbox", args, timeout)
        sandbox = sandbox_of(got["sandbox"], bool(got.get("replayed")))
        if req.wait and sandbox.phase != "READY":
            raise NotReady(
                f"sandbox {sandbox.name} was admitted but is {sandbox.phase}: "
                f"{sandbox.phase_reason or 'not READY in time'}",
                details={"sandbox": sandbox.name, "phase": sandbox.phase, "reason": sandbox.phase_reason},
            )
        return sandbox

    async def get(self, sandbox: str) -> Sandbox:
        return sandbox_of((await self._call("get_sandbox", {"sandbox": sandbox}))["sandbox"])

    async def list_sandboxes(self, include_stopped: bool) -> list[Sandbox]:
        tree = await self.children(None)
        gone = set() if include_stopped else {"STOPPED", "DELETED"}
        return [s for s in tree if s.id != self._me.id and s.phase not in gone]

    async def children(self, sandbox: str | None) -> list[Sandbox]:
        got = await self._call("list_children", {} if sandbox is None else {"sandbox": sandbox})
        return [sandbox_of(s) for s in got["sandboxes"]]

    async def watch(self, sandbox: str, timeout: float) -> AsyncIterator[Sandbox]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last = None
        while True:
            try:
                now = await self.get(sandbox)
            except LimitReached as e:
                # The tree's rate: ask again after the wait it names, within the deadline.
                if e.retry_after_ms is None or loop.time() + e.retry_after_ms / 1000 >= deadline:
                    raise
                await asyncio.sleep(e.retry_after_ms / 1000)
                continue
            if last is None or now.phase != last.phase:
                yield now
            last = now
            if now.phase in SETTLED or loop.time() >= deadline:
                return
            await asyncio.sleep(min(POLL_SECONDS, max(0.0, deadline - loop.time())))

    async def exec(self, req: ExecRequest) -> ExecResult:
        args: dict[str, Any] = {"sandbox": req.sandbox, "command": req.command}
        if req.stdin is not None:
            try:
                args["stdin"] = req.stdin.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidArgument(
                    "stdin: the door carries stdin as UTF-8 text; these bytes are not", details={"field": "stdin"}
                ) from None
        if req.env:
            args["env"] = await self._env_arg("exec", req.env)
        if req.workdir is not None:
            args["workdir"] = req.workdir
        if req.timeout_seconds is not None:
            args["timeout_seconds"] = req.timeout_seconds
        got = await self._call("exec", args, (req.timeout_seconds or 300) + 30)
        return ExecResult(
            exit_code=got["exit_code"],
            stdout=got.get("stdout", ""),
            stderr=got.get("stderr", ""),
            timed_out=bool(got.get("timed_out")),
            output_capped=bool(got.get("output_capped")),
            error=got.get("error", ""),
        )

    async def stop(self, sandbox: str, delete: bool) -> list[Sandbox]:
        got = await self._call("delete_sandbox" if delete else "stop_sandbox", {"sandbox": sandbox}, 120)
        return [sandbox_of(s) for s in got["stopped"]]

    async def get_file(self, sandbox: str, path: str, max_bytes: int | None) -> File:
        args: dict[str, Any] = {"sandbox": sandbox, "path": path}
        if max_bytes is not None:
            args["max_bytes"] = max_bytes
        got = await self._call("get_file", args, max(self._timeout, 120))
        content = got.get("content", "")
        data = base64.b64decode(content) if got.get("encoding") == "base64" else content.encode("utf-8")
        return File(path=got["path"], size=got["size"], content=data)

    async def get_grant(self, sandbox: str | None) -> Grant:
        g = await self._call("get_grant", {} if sandbox is None else {"sandbox": sandbox})
        limits = g.get("limits", {})
        return Grant(
            id=g["grant_id"],
            root=g["root"],
            state=g["state"],
            max_depth=limits.get("depth", 0),
            max_breadth=limits.get("breadth", 0),
            max_total=limits.get("total", 0),
            expires_at=timestamp(g.get("expires_at", "")),
            program=g.get("program", ""),
            sandbox=g.get("sandbox"),
            used=_limits(g.get("used")),
            remaining=_limits(g.get("remaining")),
        )

    async def create_grant(self, sandbox: str, spec: GrantSpec) -> Grant:
        raise HostOnly("create_grant", "only the user changes a grant")

    async def update_grant(self, sandbox: str, change: GrantChange) -> Grant:
        raise HostOnly("update_grant", "only the user changes a grant")

    async def revoke_grant(self, sandbox: str) -> Grant:
        raise HostOnly("revoke_grant", "only the user changes a grant")

    async def check_policy(self, candidate: str, boundary: str | None, parent: str | None) -> PolicyCheck:
        args: dict[str, Any] = {"candidate": candidate}
        if boundary is not None:
            args["boundary"] = boundary
        if parent is not None:
            args["parent"] = parent
        got = await self._call("check_policy", args, max(self._timeout, 60))
        return PolicyCheck(
            verdict=got["verdict"],
            counterexample=got.get("counterexample"),
            hint=got.get("hint"),
            reason=got.get("reason"),
        )

    async def whoami(self) -> WhoAmI:
        return WhoAmI(kind="sandbox", name=self._me.name, sandbox_id=self._me.id)
