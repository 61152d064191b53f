"""The exceptions each refusal becomes, read the same from gRPC metadata and MCP details."""

import pytest

from openshell_delegation import (
    Conflict,
    HostOnly,
    InvalidArgument,
    LimitReached,
    NotAllowed,
    NotFound,
    NotReady,
    OpenShellError,
    PolicyExceedsParent,
    PolicyUnprovable,
    Unauthenticated,
    Unavailable,
)
from openshell_delegation.errors import error_for, text_details


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        ("NOT_ALLOWED", NotAllowed),
        ("LIMIT_REACHED", LimitReached),
        ("POLICY_EXCEEDS_PARENT", PolicyExceedsParent),
        ("POLICY_UNPROVABLE", PolicyUnprovable),
        ("INVALID_ARGUMENT", InvalidArgument),
        ("NOT_FOUND", NotFound),
        ("CONFLICT", Conflict),
        ("UNAUTHENTICATED", Unauthenticated),
        ("UNAVAILABLE", Unavailable),
    ],
)
def test_each_code_has_its_class(code, cls):
    e = error_for(code, "why", {"x": 1})
    assert type(e) is cls
    assert (e.code, e.message, e.details) == (code, "why", {"x": 1})
    assert str(e) == f"{code}: why"


def test_an_unknown_code_is_the_base_class_with_that_code():
    e = error_for("SOMETHING_NEW", "eh")
    assert type(e) is OpenShellError and e.code == "SOMETHING_NEW"


def test_typed_details():
    limit = error_for("LIMIT_REACHED", "m", {"limit": "breadth", "max": 2, "current": 2})
    assert (limit.limit, limit.max, limit.current, limit.retry_after_ms) == ("breadth", 2, 2, None)
    cx = error_for("POLICY_EXCEEDS_PARENT", "m", {"counterexample": "GET a:443 /", "hint": "drop it"})
    assert (cx.counterexample, cx.hint) == ("GET a:443 /", "drop it")
    assert error_for("INVALID_ARGUMENT", "m", {"field": "env"}).field == "env"
    assert error_for("NOT_ALLOWED", "m", {"reason": "program"}).reason == "program"
    assert error_for("POLICY_UNPROVABLE", "m", {"reason": "timeout"}).reason == "timeout"
    failed = error_for("UNAVAILABLE", "m", {"sandbox": "w", "phase": "ERROR", "reason": "oom"})
    assert isinstance(failed, NotReady) and failed.phase == "ERROR"


def test_grpc_metadata_reads_back_as_the_json_mcp_sends():
    # The gateway writes non-string values as JSON text in ErrorInfo metadata.
    got = text_details({"limit": "breadth", "max": "2", "current": "2", "retry_after_ms": "150",
                        "sandbox": "123", "field": "true", "obj": '{"a": 1}', "hint": "[x]"})
    assert got == {"limit": "breadth", "max": 2, "current": 2, "retry_after_ms": 150,
                   "sandbox": "123", "field": "true", "obj": {"a": 1}, "hint": "[x]"}
    assert error_for("LIMIT_REACHED", "m", got).max == 2


def test_host_only_is_not_allowed_and_says_why():
    e = HostOnly("update_grant", "only the user changes a grant")
    assert isinstance(e, NotAllowed) and e.code == "NOT_ALLOWED" and e.reason == "host_only"
    assert "only a user on the host" in e.message and e.details["call"] == "update_grant"
