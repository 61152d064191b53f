"""What the calls return and take: frozen dataclasses, the same from either transport.

A field one transport does not carry is ``None`` there (each says which); everything else
is filled the same way on the host (gRPC) and inside a sandbox (MCP through the door).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

__all__ = [
    "ExecResult",
    "File",
    "Grant",
    "GrantSpec",
    "Limits",
    "PolicyCheck",
    "Sandbox",
    "Template",
    "WhoAmI",
]

Kind = Literal["agent", "tool"]

# Phases after which a sandbox's phase no longer changes on its own way to READY.
SETTLED = frozenset({"READY", "ERROR", "STOPPING", "STOPPED", "DELETED"})

_FRACTION = re.compile(r"(\.\d{6})\d+")


def timestamp(text: str) -> datetime | None:
    """An RFC 3339 time as the gateway writes it (UTC); ``None`` for an empty one."""
    if not text:
        return None
    # datetime reads at most microseconds; the gateway may write nanoseconds.
    return datetime.fromisoformat(_FRACTION.sub(r"\1", text).replace("Z", "+00:00"))


@dataclass(frozen=True)
class Template:
    """What a sandbox runs on. Zero means the default when creating, unlimited when shown."""

    cpu_millis: int = 0
    memory_bytes: int = 0
    pids: int = 0
    # Container driver: the image (a tag or id when creating; its digest when shown).
    image: str = ""


@dataclass(frozen=True)
class Sandbox:
    id: str
    name: str
    # "agent" (runs its own task) or "tool" (runs commands for its parent).
    kind: str
    # PROVISIONING, READY, STOPPING, STOPPED, ERROR or DELETED.
    phase: str
    phase_reason: str
    # The parent's name; None for a root.
    parent: str | None
    # The root's name (its own for a root).
    root: str
    depth: int
    command: list[str]
    # "user:NAME", or "sandbox:NAME program:PATH" for a child created through the door.
    created_by: str
    created_at: datetime | None
    policy_version: int
    policy_hash: str
    exit_code: int | None = None
    # True when a create answered a repeated request_id with the first result.
    replayed: bool = False
    # Host (gRPC) only: None through the door.
    owner: str | None = None
    parent_id: str | None = None
    root_id: str | None = None
    template: Template | None = None
    isolation: dict[str, Any] | None = field(default=None, compare=False)

    @property
    def ready(self) -> bool:
        return self.phase == "READY"


@dataclass(frozen=True)
class ExecResult:
    # The exit code, or 128 + signal (137 when killed at the timeout or the output cap).
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    output_capped: bool = False
    # Set when the command could not be started.
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.error


@dataclass(frozen=True)
class File:
    # The path as opened inside the sandbox.
    path: str
    size: int
    content: bytes

    def text(self, encoding: str = "utf-8") -> str:
        return self.content.decode(encoding)


@dataclass(frozen=True)
class Limits:
    depth: int
    breadth: int
    total: int


@dataclass(frozen=True)
class Grant:
    id: int
    # The root of the tree the grant governs.
    root: str
    # live, expired, revoked or replaced.
    state: str
    max_depth: int
    max_breadth: int
    max_total: int
    expires_at: datetime | None
    # The one program allowed to call through the door.
    program: str
    # Through the door only (None on the host): the sandbox `used` and `remaining` are seen
    # from, its depth, live children and the tree's live descendants, and what it may still
    # create.
    sandbox: str | None = None
    used: Limits | None = None
    remaining: Limits | None = None
    # Host (gRPC) only: None through the door.
    program_resolved: str | None = None
    tool_idle_seconds: int | None = None
    rate: str | None = None
    children_admitted: int | None = None
    created_by: str | None = None
    created_at: datetime | None = None
    ended_at: datetime | None = None


@dataclass(frozen=True)
class GrantSpec:
    """A grant to create: the one approval a tree's sandboxes create children within."""

    max_depth: int
    max_breadth: int
    max_total: int
    # An RFC 3339 time, a datetime, or a duration from now ("4h", "30m").
    expires: str | datetime
    # The absolute path of the one program allowed to call through the door.
    program: str
    # Seconds after which a tool child with no exec is stopped (None: 300).
    tool_idle_seconds: int | None = None
    # MCP tool calls each sandbox of the tree may make: "N/s" or "N/min" (None: 10/s).
    rate: str | None = None


@dataclass(frozen=True)
class PolicyCheck:
    # within, exceeds, unsupported or inconclusive; only within would be admitted.
    verdict: str
    # exceeds: a request the candidate allows and the boundary does not, and how to narrow.
    counterexample: str | None = None
    hint: str | None = None
    # unsupported or inconclusive: why.
    reason: str | None = None

    @property
    def within(self) -> bool:
        return self.verdict == "within"


@dataclass(frozen=True)
class WhoAmI:
    # "user" or "sandbox".
    kind: str
    name: str
    admin: bool = False
    sandbox_id: str | None = None
