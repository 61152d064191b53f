"""The host transport: gRPC (``proto/openshell/v1/gateway.proto``, generated into ``_proto``)
with the user's login token on every call, and refusals read from the status's
``google.rpc.ErrorInfo`` (reason: the code; metadata: the details)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import grpc
import grpc.aio
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from ._proto import gateway_pb2 as pb
from ._proto import gateway_pb2_grpc as pb_grpc
from ._transport import CreateRequest, ExecRequest, GrantChange, Place
from .config import HostConfig
from .errors import NotReady, OpenShellError, error_for, text_details
from .types import SETTLED, ExecResult, File, Grant, GrantSpec, PolicyCheck, Sandbox, Template, WhoAmI, timestamp

# The gRPC status a refusal without the gateway's ErrorInfo stands for (one the transport or a
# proxy made), only where it names exactly one of the gateway's codes (crates/client, code.rs).
_FROM_STATUS = {
    grpc.StatusCode.UNAVAILABLE: "UNAVAILABLE",
    grpc.StatusCode.DEADLINE_EXCEEDED: "UNAVAILABLE",
    grpc.StatusCode.UNAUTHENTICATED: "UNAUTHENTICATED",
    grpc.StatusCode.PERMISSION_DENIED: "NOT_ALLOWED",
    grpc.StatusCode.INVALID_ARGUMENT: "INVALID_ARGUMENT",
    grpc.StatusCode.NOT_FOUND: "NOT_FOUND",
}

_KINDS = {pb.SANDBOX_KIND_AGENT: "agent", pb.SANDBOX_KIND_TOOL: "tool"}
_KIND_OF = {"agent": pb.SANDBOX_KIND_AGENT, "tool": pb.SANDBOX_KIND_TOOL}

# Bytes of stdin sent in one message.
_STDIN_CHUNK = 32 * 1024


def refusal(err: grpc.aio.AioRpcError, endpoint: str) -> OpenShellError:
    """The SDK's exception for a failed call, from the gateway's ErrorInfo when it sent one."""
    info = None
    try:
        status = rpc_status.from_call(err)
    except ValueError:
        status = None
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                break
    message = err.details() or ""
    if info is not None and info.reason:
        return error_for(info.reason, message.removeprefix(f"{info.reason}: "), text_details(dict(info.metadata)))
    code = _FROM_STATUS.get(err.code())
    if code == "UNAVAILABLE":
        message = f"cannot reach the gateway at {endpoint} ({message}); is it running?"
    return error_for(code or err.code().name, message, {"grpc_status": err.code().name})


def sandbox_of(s: Any, replayed: bool = False) -> Sandbox:
    template = s.template if s.HasField("template") else None
    isolation = None
    if s.isolation:
        try:
            isolation = json.loads(s.isolation)
        except ValueError:
            isolation = {"detail": s.isolation}
    return Sandbox(
        id=s.id,
        name=s.name,
        kind=_KINDS.get(s.kind, "agent"),
        phase=s.phase,
        phase_reason=s.phase_reason,
        parent=s.parent_name or None,
        root=s.root_name or (s.name if not s.parent_id else ""),
        depth=s.depth,
        command=list(s.command),
        created_by=s.created_by,
        created_at=timestamp(s.created_at),
        policy_version=s.policy_version,
        policy_hash=s.policy_hash,
        exit_code=s.exit_code if s.HasField("exit_code") else None,
        replayed=replayed,
        owner=s.owner,
        parent_id=s.parent_id or None,
        root_id=s.root_id,
        template=None
        if template is None
        else Template(template.cpu_millis, template.memory_bytes, template.pids, template.image),
        isolation=isolation,
    )


def grant_of(g: Any) -> Grant:
    return Grant(
        id=g.id,
        root=g.root_name,
        state=g.state,
        max_depth=g.max_depth,
        max_breadth=g.max_breadth,
        max_total=g.max_total,
        expires_at=timestamp(g.expires_at),
        program=g.program,
        program_resolved=g.program_resolved or None,
        tool_idle_seconds=g.tool_idle_seconds,
        rate=g.rate or None,
        children_admitted=g.children_admitted,
        created_by=g.created_by,
        created_at=timestamp(g.created_at),
        ended_at=timestamp(g.ended_at),
    )


def expires_text(expires: str | datetime) -> str:
    if isinstance(expires, datetime):
        if expires.tzinfo is None:
            raise ValueError("naive datetime")
        return expires.astimezone(timezone.utc).isoformat()
    return expires


def grant_spec(spec: GrantSpec) -> Any:
    return pb.GrantSpec(
        max_depth=spec.max_depth,
        max_breadth=spec.max_breadth,
        max_total=spec.max_total,
        expires=expires_text(spec.expires),
        program=spec.program,
        tool_idle_seconds=spec.tool_idle_seconds or 0,
        rate=spec.rate or "",
    )


class GrpcTransport:
    place: Place = "host"

    def __init__(self, config: HostConfig, timeout: float) -> None:
        self._config = config
        self._timeout = timeout
        self._channel: grpc.aio.Channel | None = None
        self._metadata = (("authorization", f"Bearer {config.token}"),)
        self._stubs: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"GrpcTransport(endpoint={self._config.endpoint!r}, token=<redacted>)"

    def _stub(self, service: str) -> Any:
        # The channel belongs to the event loop of its first call (grpc.aio's rule).
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(self._config.target)
        stub = self._stubs.get(service)
        if stub is None:
            stub = getattr(pb_grpc, f"{service}Stub")(self._channel)
            self._stubs[service] = stub
        return stub

    async def _unary(self, service: str, method: str, request: Any, timeout: float | None = None) -> Any:
        call: Callable[..., Awaitable[Any]] = getattr(self._stub(service), method)
        try:
            return await call(request, metadata=self._metadata, timeout=timeout or self._timeout)
        except grpc.aio.AioRpcError as e:
            raise refusal(e, self._config.endpoint) from None

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None
            self._stubs.clear()

    async def create(self, req: CreateRequest) -> Sandbox:
        template = None
        if req.template is not None:
            t = req.template
            template = pb.Template(cpu_millis=t.cpu_millis, memory_bytes=t.memory_bytes, pids=t.pids, image=t.image)
        if req.parent is None:
            root = pb.CreateSandboxRequest(
                name=req.name or "",
                command=req.command,
                policy_yaml=req.policy or "",
                request_id=req.request_id,
                env=req.env,
            )
            if req.grant is not None:
                root.grant.CopyFrom(grant_spec(req.grant))
            if template is not None:
                root.template.CopyFrom(template)
            made = await self._unary("Sandboxes", "CreateSandbox", root)
        else:
            child = pb.CreateChildSandboxRequest(
                parent=req.parent,
                name=req.name or "",
                kind=_KIND_OF[req.kind],
                command=req.command,
                policy_yaml=req.policy or "",
                request_id=req.request_id,
                env=req.env,
            )
            if template is not None:
                child.template.CopyFrom(template)
            made = await self._unary("Sandboxes", "CreateChildSandbox", child)
        sandbox = sandbox_of(made.sandbox, made.replayed)
        if not req.wait or sandbox.phase in SETTLED:
            return sandbox
        last = sandbox
        async for seen in self.watch(sandbox.id, req.ready_timeout):
            last = seen
        if last.phase != "READY":
            raise NotReady(
                f"sandbox {last.name} was admitted but is {last.phase}: {last.phase_reason or 'not READY in time'}",
                details={"sandbox": last.name, "phase": last.phase, "reason": last.phase_reason},
            )
        return replace(last, replayed=sandbox.replayed)

    async def get(self, sandbox: str) -> Sandbox:
        return sandbox_of(await self._unary("Sandboxes", "GetSandbox", pb.GetSandboxRequest(sandbox=sandbox)))

    async def list_sandboxes(self, include_stopped: bool) -> list[Sandbox]:
        out: list[Sandbox] = []
        token = ""
        while True:
            page = await self._unary(
                "Sandboxes",
                "ListSandboxes",
                pb.ListSandboxesRequest(page_size=1000, page_token=token, all=include_stopped),
            )
            out.extend(sandbox_of(s) for s in page.sandboxes)
            token = page.next_page_token
            if not token:
                return out

    async def children(self, sandbox: str | None) -> list[Sandbox]:
        got = await self._unary("Sandboxes", "ListChildren", pb.ListChildrenRequest(sandbox=sandbox or ""))
        return [sandbox_of(s) for s in got.sandboxes]

    async def watch(self, sandbox: str, timeout: float) -> AsyncIterator[Sandbox]:
        request = pb.WatchSandboxRequest(sandbox=sandbox, timeout_seconds=max(1, min(3600, int(timeout))))
        stream = self._stub("Sandboxes").WatchSandbox(request, metadata=self._metadata, timeout=timeout + 10)
        try:
            async for s in stream:
                yield sandbox_of(s)
        except grpc.aio.AioRpcError as e:
            raise refusal(e, self._config.endpoint) from None
        finally:
            stream.cancel()

    async def exec(self, req: ExecRequest) -> ExecResult:
        start = pb.ExecStart(
            sandbox=req.sandbox,
            command=req.command,
            env=req.env,
            workdir=req.workdir or "",
            timeout_seconds=req.timeout_seconds or 0,
            stdin=req.stdin is not None,
        )
        done = asyncio.Event()

        async def requests() -> AsyncIterator[Any]:
            yield pb.ExecInput(start=start)
            if req.stdin is not None:
                for i in range(0, len(req.stdin), _STDIN_CHUNK):
                    yield pb.ExecInput(stdin=req.stdin[i : i + _STDIN_CHUNK])
                yield pb.ExecInput(stdin_eof=True)
            # The request stream stays open until the answer is complete (as the CLI's does).
            await done.wait()

        deadline = (req.timeout_seconds or 300) + 30
        stream = self._stub("Sandboxes").ExecSandbox(requests(), metadata=self._metadata, timeout=deadline)
        stdout, stderr = bytearray(), bytearray()
        try:
            async for msg in stream:
                which = msg.WhichOneof("output")
                if which == "stdout":
                    stdout += msg.stdout
                elif which == "stderr":
                    stderr += msg.stderr
                elif which == "exit":
                    x = msg.exit
                    return ExecResult(
                        exit_code=x.code,
                        stdout=stdout.decode("utf-8", "replace"),
                        stderr=stderr.decode("utf-8", "replace"),
                        timed_out=x.timed_out,
                        output_capped=x.output_capped,
                        error=x.error,
                    )
        except grpc.aio.AioRpcError as e:
            raise refusal(e, self._config.endpoint) from None
        finally:
            done.set()
            stream.cancel()
        raise error_for("UNAVAILABLE", "the gateway ended the exec without an exit status", {"sandbox": req.sandbox})

    async def stop(self, sandbox: str, delete: bool) -> list[Sandbox]:
        if delete:
            got = await self._unary("Sandboxes", "DeleteSandbox", pb.DeleteSandboxRequest(sandbox=sandbox), 120)
        else:
            got = await self._unary("Sandboxes", "StopSandbox", pb.StopSandboxRequest(sandbox=sandbox), 120)
        return [sandbox_of(s) for s in got.stopped]

    async def get_file(self, sandbox: str, path: str, max_bytes: int | None) -> File:
        request = pb.GetFileRequest(sandbox=sandbox, path=path, max_bytes=max_bytes or 0)
        stream = self._stub("Sandboxes").GetFile(request, metadata=self._metadata, timeout=max(self._timeout, 300))
        opened, size, data = path, 0, bytearray()
        try:
            async for chunk in stream:
                if chunk.WhichOneof("chunk") == "info":
                    opened, size = chunk.info.path, chunk.info.size
                else:
                    data += chunk.data
        except grpc.aio.AioRpcError as e:
            raise refusal(e, self._config.endpoint) from None
        return File(path=opened, size=size, content=bytes(data))

    async def get_grant(self, sandbox: str | None) -> Grant:
        return grant_of(await self._unary("Grants", "GetGrant", pb.GetGrantRequest(sandbox=sandbox or "")))

    async def create_grant(self, sandbox: str, spec: GrantSpec) -> Grant:
        request = pb.CreateGrantRequest(sandbox=sandbox, grant=grant_spec(spec))
        return grant_of(await self._unary("Grants", "CreateGrant", request))

    async def update_grant(self, sandbox: str, change: GrantChange) -> Grant:
        request = pb.UpdateGrantRequest(sandbox=sandbox)
        for name in ("max_depth", "max_breadth", "max_total", "expires", "program", "tool_idle_seconds", "rate"):
            value = getattr(change, name)
            if value is not None:
                setattr(request, name, value)
        return grant_of(await self._unary("Grants", "UpdateGrant", request))

    async def revoke_grant(self, sandbox: str) -> Grant:
        return grant_of(await self._unary("Grants", "RevokeGrant", pb.RevokeGrantRequest(sandbox=sandbox)))

    async def check_policy(self, candidate: str, boundary: str | None, parent: str | None) -> PolicyCheck:
        request = pb.CheckPolicyRequest(candidate_yaml=candidate, boundary_yaml=boundary or "", parent=parent or "")
        got = await self._unary("Policies", "CheckPolicy", request, max(self._timeout, 60))
        return PolicyCheck(
            verdict=got.verdict,
            counterexample=got.counterexample or None,
            hint=got.hint or None,
            reason=got.reason or None,
        )

    async def whoami(self) -> WhoAmI:
        got = await self._unary("Users", "WhoAmI", pb.WhoAmIRequest())
        return WhoAmI(kind=got.kind, name=got.name, admin=got.admin, sandbox_id=got.sandbox_id or None)

