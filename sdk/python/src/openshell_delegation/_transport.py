"""What each transport does for the client: the same calls, already checked and typed.

``GrpcTransport`` (host, ``_grpc.py``) and ``DoorTransport`` (inside a sandbox, ``_door.py``)
implement it; the client (``client.py``) checks arguments, waits and retries, once for both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal, Protocol

from .types import ExecResult, File, Grant, GrantSpec, PolicyCheck, Sandbox, Template, WhoAmI

Place = Literal["host", "sandbox"]


@dataclass(frozen=True)
class CreateRequest:
    command: list[str]
    name: str | None
    parent: str | None
    kind: str
    policy: str | None
    env: dict[str, str]
    request_id: str
    wait: bool
    # How long a waiting create may take, in seconds.
    ready_timeout: float
    grant: GrantSpec | None = None
    template: Template | None = None


@dataclass(frozen=True)
class ExecRequest:
    sandbox: str
    command: list[str]
    stdin: bytes | None
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    timeout_seconds: int | None = None


@dataclass(frozen=True)
class GrantChange:
    max_depth: int | None = None
    max_breadth: int | None = None
    max_total: int | None = None
    expires: str | None = None
    program: str | None = None
    tool_idle_seconds: int | None = None
    rate: str | None = None


class Transport(Protocol):
    place: Place

    async def create(self, req: CreateRequest) -> Sandbox: ...

    async def get(self, sandbox: str) -> Sandbox: ...

    async def list_sandboxes(self, include_stopped: bool) -> list[Sandbox]: ...

    async def children(self, sandbox: str | None) -> list[Sandbox]: ...

    def watch(self, sandbox: str, timeout: float) -> AsyncIterator[Sandbox]: ...

    async def exec(self, req: ExecRequest) -> ExecResult: ...

    async def stop(self, sandbox: str, delete: bool) -> list[Sandbox]: ...

    async def get_file(self, sandbox: str, path: str, max_bytes: int | None) -> File: ...

    async def get_grant(self, sandbox: str | None) -> Grant: ...

    async def create_grant(self, sandbox: str, spec: GrantSpec) -> Grant: ...

    async def update_grant(self, sandbox: str, change: GrantChange) -> Grant: ...

    async def revoke_grant(self, sandbox: str) -> Grant: ...

    async def check_policy(self, candidate: str, boundary: str | None, parent: str | None) -> PolicyCheck: ...

    async def whoami(self) -> WhoAmI: ...

    async def close(self) -> None: ...


