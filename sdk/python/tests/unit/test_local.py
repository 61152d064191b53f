"""What the SDK decides before sending anything: where it runs, its credentials, and
arguments it cannot send. Nothing here reaches a gateway (the addresses answer nothing)."""

import asyncio
import json
import os

import pytest

from openshell_delegation import (
    AsyncSandboxClient,
    GrantSpec,
    HostOnly,
    InvalidArgument,
    SandboxClient,
    Template,
    Unauthenticated,
    Unavailable,
)
from openshell_delegation.config import host_config

# Nothing listens on port 9 of loopback (discard): a call that is sent fails as UNAVAILABLE.
NOWHERE = "http://127.0.0.1:9"


@pytest.fixture
def host_env(monkeypatch, tmp_path):
    for name in ("OPENSHELL_SANDBOX_ID", "OPENSHELL_SANDBOX_NAME", "OPENSHELL_ENDPOINT", "OPENSHELL_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENSHELL_CONFIG", str(tmp_path / "config.json"))
    return tmp_path / "config.json"


@pytest.fixture
def sandbox_env(monkeypatch):
    monkeypatch.setenv("OPENSHELL_SANDBOX_ID", "01a2-test")
    monkeypatch.setenv("OPENSHELL_SANDBOX_NAME", "lead")
    monkeypatch.delenv("OPENSHELL_ENDPOINT", raising=False)
    monkeypatch.delenv("OPENSHELL_TOKEN", raising=False)


def test_the_host_takes_the_config_file_then_the_environment_then_arguments(host_env, monkeypatch):
    host_env.write_text(json.dumps({"endpoint": "http://127.0.0.1:7001", "user": "u", "token": "from-file"}))
    c = host_config()
    assert (c.endpoint, c.token) == ("http://127.0.0.1:7001", "from-file")
    monkeypatch.setenv("OPENSHELL_TOKEN", "from-env")
    monkeypatch.setenv("OPENSHELL_ENDPOINT", "http://127.0.0.1:7002")
    c = host_config()
    assert (c.endpoint, c.token) == ("http://127.0.0.1:7002", "from-env")
    c = host_config("http://127.0.0.1:7003", "from-arg")
    assert (c.endpoint, c.token, c.target) == ("http://127.0.0.1:7003", "from-arg", "127.0.0.1:7003")
    assert "from-arg" not in repr(c)


def test_no_token_on_the_host_says_where_one_comes_from(host_env):
    with pytest.raises(Unauthenticated) as e:
        SandboxClient()
    assert "OPENSHELL_TOKEN" in e.value.message and str(host_env) in e.value.message
    assert e.value.details["field"] == "token"


@pytest.mark.parametrize(("endpoint", "why"), [("https://h:1", "https is not supported"), ("h:1", "http://")])
def test_a_bad_endpoint_is_named(host_env, endpoint, why):
    with pytest.raises(InvalidArgument) as e:
        SandboxClient(endpoint, token="t")
    assert why in e.value.message and e.value.field == "endpoint"


def test_a_broken_config_file_is_named(host_env):
    host_env.write_text("{not json")
    with pytest.raises(InvalidArgument) as e:
        SandboxClient()
    assert str(host_env) in e.value.message


def test_inside_a_sandbox_the_client_uses_the_door_with_no_credential(sandbox_env):
    with SandboxClient() as c:
        assert c.place == "sandbox"
        assert "openshell.local/mcp" in repr(c)
        assert c.whoami().name == "lead"
    # An explicit endpoint or token means gRPC, even inside.
    with SandboxClient(NOWHERE, token="t") as c:
        assert c.place == "host"


def test_the_token_never_shows(host_env):
    with SandboxClient(NOWHERE, token="s3cret-token") as c:
        assert "s3cret-token" not in repr(c)
        with pytest.raises(Unavailable) as e:
            c.get("x")
        assert "s3cret-token" not in str(e.value) and "s3cret-token" not in repr(e.value)


def test_host_only_calls_are_refused_inside_before_anything_is_sent(sandbox_env):
    # The door URL answers nothing: a call that left the process would be UNAVAILABLE.
    with SandboxClient(transport="door", door_url=NOWHERE + "/mcp") as c:
        spec = GrantSpec(1, 2, 3, "1h", "/usr/bin/python3")
        for call in (
            lambda: c.create_grant("lead", spec),
            lambda: c.update_grant("lead", max_breadth=9),
            lambda: c.revoke_grant("lead"),
            lambda: c.create(["true"], grant=spec),
            lambda: c.create(["true"], template=Template(memory_bytes=1 << 30)),
        ):
            with pytest.raises(HostOnly) as e:
                call()
            assert e.value.code == "NOT_ALLOWED" and e.value.reason == "host_only"
        with pytest.raises(Unavailable):
            c.get("lead")


def test_arguments_the_sdk_cannot_send_are_named(host_env):
    with SandboxClient(NOWHERE, token="t") as c:
        cases = [
            (lambda: c.create("sleep 600"), "command"),
            (lambda: c.create([]), "command"),
            (lambda: c.create(["sleep", 600]), "command"),
            (lambda: c.create(["true"], kind="worker"), "kind"),
            (lambda: c.create(["true"], kind="tool"), "kind"),
            (lambda: c.create(["true"], parent="lead", grant=GrantSpec(1, 1, 1, "1h", "/bin/true")), "grant"),
            (lambda: c.create(["true"], env={"A": 1}), "env.A"),
            (lambda: c.create(["true"], request_id=""), "request_id"),
            (lambda: c.exec("w", ["true"], timeout_seconds=0), "timeout_seconds"),
            (lambda: c.get_file("w", ""), "path"),
            (lambda: c.children(), "sandbox"),
            (lambda: c.get_grant(), "sandbox"),
            (lambda: c.check_policy("version: 1"), "parent"),
            (lambda: c.check_policy("version: 1", parent="a", boundary="version: 1"), "boundary"),
            (lambda: c.update_grant("lead"), "update_grant"),
        ]
        for call, field in cases:
            with pytest.raises(InvalidArgument) as e:
                call()
            assert e.value.field == field, (field, e.value)


def test_an_env_value_never_shows_in_its_error(host_env):
    with SandboxClient(NOWHERE, token="t") as c:
        with pytest.raises(InvalidArgument) as e:
            c.create(["true"], env={"SECRET": b"hunter2"})  # type: ignore[dict-item]
        assert "hunter2" not in str(e.value) and e.value.field == "env.SECRET"


def test_the_async_client_refuses_the_same_way(sandbox_env):
    async def main():
        async with AsyncSandboxClient(transport="door", door_url=NOWHERE + "/mcp") as c:
            with pytest.raises(HostOnly):
                await c.revoke_grant("lead")

    asyncio.run(main())


def test_in_sandbox_follows_the_supervisor_variables(sandbox_env, monkeypatch):
    from openshell_delegation import in_sandbox

    assert in_sandbox()
    monkeypatch.delenv("OPENSHELL_SANDBOX_ID")
    assert not in_sandbox()
    assert os.environ.get("OPENSHELL_SANDBOX_NAME") == "lead"
