"""Errors: one exception class per error code of the gateway (docs/design.md, "Error codes").

Every refusal carries the gateway's ``code``, its ``message`` and its ``details`` (which
field, which limit and its values, the counterexample, ...), whichever transport brought
it. The typed attributes (``LimitReached.limit``, ``InvalidArgument.field``, ...) read the
details the same way over gRPC and MCP.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "Conflict",
    "HostOnly",
    "InvalidArgument",
    "LimitReached",
    "NotAllowed",
    "NotFound",
    "NotReady",
    "OpenShellError",
    "PolicyExceedsParent",
    "PolicyUnprovable",
    "Unauthenticated",
    "Unavailable",
    "error_for",
]


class OpenShellError(Exception):
    """A call the gateway refused or could not serve.

    ``code`` is one of the gateway's codes (``NOT_ALLOWED``, ``LIMIT_REACHED``, ...), or,
    for a failure no gateway explained (a protocol fault), the transport's name for it.
    """

    code: str = "ERROR"

    def __init__(self, message: str, *, code: str | None = None, details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, details={self.details!r})"

    def _text(self, key: str) -> str | None:
        value = self.details.get(key)
        return None if value is None else str(value)

    def _int(self, key: str) -> int | None:
        value = self.details.get(key)
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                return None
        return None


class NotAllowed(OpenShellError):
    """No grant, revoked or expired, the wrong program, not your descendant, a tool
    creating, an agent touching a grant. ``reason`` says which (``no_grant``, ...)."""

    code = "NOT_ALLOWED"

    @property
    def reason(self) -> str | None:
        return self._text("reason")


class HostOnly(NotAllowed):
    """A call only a user on the host can make (a root, a grant change, ...), made from
    inside a sandbox. Refused by the SDK before anything is sent: the door serves only
    what a sandbox may do. ``details``: ``{"reason": "host_only", "call": NAME}``."""

    def __init__(self, call: str, why: str) -> None:
        super().__init__(
            f"{call}: only a user on the host can do this; inside a sandbox the SDK reaches the gateway "
            f"through its door, which serves what a sandbox may do ({why})",
            details={"reason": "host_only", "call": call},
        )


class LimitReached(OpenShellError):
    """A grant limit (depth, breadth, total, rate, ...) or a size cap was reached.

    ``limit`` names it, ``max`` and ``current`` give the values the gateway reported, and
    a rate refusal has ``retry_after_ms``."""

    code = "LIMIT_REACHED"

    @property
    def limit(self) -> str | None:
        return self._text("limit")

    @property
    def max(self) -> int | None:
        return self._int("max")

    @property
    def current(self) -> int | None:
        return self._int("current")

    @property
    def retry_after_ms(self) -> int | None:
        return self._int("retry_after_ms")


class PolicyExceedsParent(OpenShellError):
    """The prover found a request the child's policy allows and its boundary does not."""

    code = "POLICY_EXCEEDS_PARENT"

    @property
    def counterexample(self) -> str | None:
        return self._text("counterexample")

    @property
    def hint(self) -> str | None:
        return self._text("hint")


class PolicyUnprovable(OpenShellError):
    """The prover could not decide (an unsupported shape, a timeout); ``reason`` says why."""

    code = "POLICY_UNPROVABLE"

    @property
    def reason(self) -> str | None:
        return self._text("reason")


class InvalidArgument(OpenShellError):
    """Malformed input; ``field`` names the argument at fault."""

    code = "INVALID_ARGUMENT"

    @property
    def field(self) -> str | None:
        return self._text("field")


class NotFound(OpenShellError):
    code = "NOT_FOUND"


class Conflict(OpenShellError):
    """A name in use (a STOPPED sandbox still holds its name until deleted), a request_id
    reused with other arguments, a live grant that exists already."""

    code = "CONFLICT"


class Unauthenticated(OpenShellError):
    """No credential, or one the gateway does not accept."""

    code = "UNAUTHENTICATED"


class Unavailable(OpenShellError):
    """The gateway, its database, the driver or the door cannot serve now; retry later."""

    code = "UNAVAILABLE"


class NotReady(Unavailable):
    """A sandbox that was admitted did not become READY: it failed to start, stopped, or
    was still starting when the wait ended. ``phase`` is the last phase seen."""

    @property
    def sandbox(self) -> str | None:
        return self._text("sandbox")

    @property
    def phase(self) -> str | None:
        return self._text("phase")

    @property
    def reason(self) -> str | None:
        return self._text("reason")


_BY_CODE: dict[str, type[OpenShellError]] = {
    cls.code: cls
    for cls in (
        NotAllowed,
        LimitReached,
        PolicyExceedsParent,
        PolicyUnprovable,
        InvalidArgument,
        NotFound,
        Conflict,
        Unauthenticated,
        Unavailable,
    )
}

# Details the gateway sends as text: never read as JSON even when they look like it.
_TEXT_KEYS = frozenset(
    {"sandbox", "parent", "name", "field", "reason", "hint", "counterexample", "program", "limit", "phase", "kind"}
)


_JSON_STARTS = frozenset('{[-0123456789tfn')


def text_details(metadata: Mapping[str, str]) -> dict[str, Any]:
    """Details from gRPC ErrorInfo metadata, where the gateway wrote every value that is not
    a string as its JSON text (numbers, objects): read back, so they match MCP's."""
    out: dict[str, Any] = {}
    for key, value in metadata.items():
        if key not in _TEXT_KEYS and value[:1] in _JSON_STARTS:
            try:
                out[key] = json.loads(value)
                continue
            except ValueError:
                pass
        out[key] = value
    return out


def error_for(code: str, message: str, details: Mapping[str, Any] | None = None) -> OpenShellError:
    """The exception for one of the gateway's refusals (an unknown code gets the base class)."""
    details = dict(details or {})
    cls = _BY_CODE.get(code, OpenShellError)
    if cls is Unavailable and "phase" in details and "sandbox" in details:
        cls = NotReady
    return cls(message, code=code, details=details)
