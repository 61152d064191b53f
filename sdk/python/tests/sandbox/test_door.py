"""The SDK inside a lead, run by its grant's program, through the door only: the same calls
as on the host, the grant's limits, and the host-only calls refused locally.

The lead's grant (tests/e2e/python_sdk.rs): max_depth 1, max_breadth 2, max_total 3, program
/usr/bin/python3. Tests clean up their children, so each starts with none.
"""

import asyncio
import os

import pytest

from openshell_delegation import (
    AsyncSandboxClient,
    GrantSpec,
    HostOnly,
    InvalidArgument,
    LimitReached,
    NotAllowed,
    NotFound,
    PolicyExceedsParent,
    SandboxClient,
)

ME = os.environ.get("OPENSHELL_SANDBOX_NAME", "")


@pytest.fixture(autouse=True)
def no_children_left(client):
    yield
    for s in client.list():
        client.delete(s)


def test_the_client_is_the_sandbox_through_the_door(client):
    assert client.place == "sandbox" and "openshell.local/mcp" in repr(client)
    me = client.whoami()
    assert (me.kind, me.name) == ("sandbox", ME)
    grant = client.get_grant()
    assert (grant.root, grant.sandbox, grant.max_breadth, grant.max_total) == (ME, ME, 2, 3)
    assert grant.used is not None and grant.remaining is not None
    assert (grant.used.breadth, grant.remaining.breadth) == (0, 2)
    assert grant.program == "/usr/bin/python3"


def test_a_tool_child_runs_commands(client, name):
    tool = client.create(["sleep", "600"], name=name("tool"), kind="tool")
    assert (tool.phase, tool.parent, tool.root, tool.kind) == ("READY", ME, ME, "tool")
    assert tool.created_by.startswith(f"sandbox:{ME} program:")
    ran = client.exec(tool, ["sh", "-c", "echo out; echo err >&2; cat; exit 4"], stdin="fed")
    assert (ran.exit_code, ran.stdout, ran.stderr) == (4, "out\nfed", "err\n")
    env = client.exec(tool, ["sh", "-c", 'printf "%s" "$WHO"'], env={"WHO": "door"})
    assert env.stdout == "door"
    with pytest.raises(InvalidArgument) as e:
        client.exec(tool, ["cat"], stdin=b"\xff\xfe")
    assert e.value.field == "stdin"
    assert [s.name for s in client.children()] == [ME, tool.name]
    assert [s.name for s in client.list()] == [tool.name]
    assert client.get(tool.name).id == tool.id
    assert [s.name for s in client.stop(tool)] == [tool.name]
    assert client.get(tool).phase == "STOPPED"
    assert client.list() == [] and [s.name for s in client.list(include_stopped=True)] == [tool.name]


def test_a_repeated_request_id_creates_nothing(client, name):
    first = client.create(["sleep", "600"], name=name("r"), kind="tool", request_id=name("req"))
    again = client.create(["sleep", "600"], name=name("r"), kind="tool", request_id=name("req"))
    assert (first.replayed, again.replayed, again.id) == (False, True, first.id)
    assert len(client.list()) == 1


def test_breadth_is_refused_with_the_limit(client, name):
    for i in range(2):
        client.create(["sleep", "600"], name=name(f"b{i}"), kind="tool")
    with pytest.raises(LimitReached) as e:
        client.create(["sleep", "600"], name=name("b2"), kind="tool")
    assert (e.value.limit, e.value.max, e.value.current) == ("breadth", 2, 2)
    assert len(client.list()) == 2
    assert client.get_grant().remaining.breadth == 0


def test_a_wider_policy_is_refused_with_its_counterexample(client, name, wider):
    with pytest.raises(PolicyExceedsParent) as e:
        client.create(["sleep", "600"], name=name("wide"), policy=wider)
    # This lead has no network rules, so the child's network rules also bring upstream's
    # baseline paths (docs/upstream-policies.md): its first excess may be one of those.
    first_excess = ("example.com", "/app", "/var/log")
    assert any(x in (e.value.counterexample or "") for x in first_excess) and e.value.hint
    check = client.check_policy(wider)
    assert check.verdict == "exceeds" and any(x in (check.counterexample or "") for x in first_excess)
    assert client.list() == []


def test_host_only_calls_are_refused_here_and_change_nothing(client):
    before = client.get_grant()
    spec = GrantSpec(5, 5, 5, "1h", "/usr/bin/python3")
    for call in (
        lambda: client.create_grant(ME, spec),
        lambda: client.update_grant(ME, max_breadth=50),
        lambda: client.revoke_grant(ME),
        lambda: client.create(["sleep", "1"], grant=spec),
    ):
        with pytest.raises(HostOnly) as e:
            call()
        assert e.value.code == "NOT_ALLOWED" and e.value.reason == "host_only"
    after = client.get_grant()
    assert (after.id, after.state, after.max_breadth) == (before.id, "live", before.max_breadth)


def test_files_of_an_agent_child(client, name):
    script = 'printf "from the child" > .o && mv .o out.txt; printf "\\377\\000" > .b && mv .b blob; exec sleep 600'
    agent = client.create(["sh", "-c", script], name=name("agent"))
    for _ in range(100):
        try:
            text, blob = client.get_file(agent, "out.txt"), client.get_file(agent, "blob")
            break
        except NotFound:
            pass
    assert (text.text(), text.size, blob.content) == ("from the child", 14, b"\xff\x00")
    with pytest.raises(LimitReached):
        client.get_file(agent, "out.txt", max_bytes=4)


def test_watch_and_wait_ready_poll_through_the_door(client, name):
    child = client.create(["sleep", "600"], name=name("w"), kind="tool", wait=False)
    phases = [s.phase for s in client.watch(child)]
    assert phases[-1] == "READY"
    assert client.wait_ready(child.name).ready


def test_a_second_client_in_a_thread_works_alongside(client, name):
    import threading

    seen: list[str] = []

    def other() -> None:
        with SandboxClient() as c:
            seen.append(c.get_grant().root)

    t = threading.Thread(target=other)
    t.start()
    client.get_grant()
    t.join(60)
    assert seen == [ME]
