"""The SDK from the host: gRPC with a user's login against a real gateway, database and
sandboxes (the process driver's full isolation)."""

import asyncio
import json
import os

import pytest

from openshell_delegation import (
    AsyncSandboxClient,
    Conflict,
    GrantSpec,
    InvalidArgument,
    LimitReached,
    NotAllowed,
    NotFound,
    NotReady,
    PolicyExceedsParent,
    SandboxClient,
    Unauthenticated,
    Unavailable,
)


def test_a_root_its_tool_child_and_exec(client, lead, name):
    assert client.place == "host"
    assert lead.phase == "READY" and lead.parent is None and lead.root == lead.name and lead.depth == 0
    assert lead.owner == client.whoami().name and lead.created_by.startswith("user:")
    tool = client.create(["sleep", "600"], name=name("tool"), parent=lead.name, kind="tool")
    assert (tool.phase, tool.kind, tool.parent, tool.root, tool.depth) == ("READY", "tool", lead.name, lead.name, 1)
    ran = client.exec(tool, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (ran.exit_code, ran.stdout, ran.stderr, ran.ok) == (3, "out\n", "err\n", False)
    fed = client.exec(tool.name, ["wc", "-c"], stdin=b"\x00\x01abc")
    assert fed.stdout.strip() == "5" and fed.ok
    env = client.exec(tool, ["sh", "-c", 'printf "%s" "$GREETING"'], env={"GREETING": "hi there"})
    assert env.stdout == "hi there"
    assert [s.name for s in client.children(lead)] == [lead.name, tool.name]
    assert client.get(tool.id).name == tool.name


def test_stop_goes_deepest_first_and_delete_frees_the_name(client, lead, name):
    child = client.create(["sleep", "600"], name=name("kid"), parent=lead)
    stopped = client.stop(lead)
    assert [s.name for s in stopped] == [child.name, lead.name]
    assert client.get(child).phase == "STOPPED"
    with pytest.raises(Conflict):
        client.create(["sleep", "600"], name=lead.name)
    assert lead.name not in [s.name for s in client.list()]
    assert lead.name in [s.name for s in client.list(include_stopped=True)]
    client.delete(lead)
    again = client.create(["sleep", "600"], name=lead.name)
    assert again.id != lead.id
    client.delete(again)


def test_a_repeated_request_id_creates_nothing(client, lead, name):
    first = client.create(["sleep", "600"], name=name("w"), parent=lead, kind="tool", request_id=name("r"))
    again = client.create(["sleep", "600"], name=name("w"), parent=lead, kind="tool", request_id=name("r"))
    assert (first.replayed, again.replayed, again.id) == (False, True, first.id)
    with pytest.raises(Conflict):
        client.create(["sleep", "601"], name=name("w"), parent=lead, kind="tool", request_id=name("r"))
    assert len(client.children(lead)) == 2


def test_breadth_is_refused_with_the_limit_and_nothing_is_created(client, lead, name):
    for i in range(2):
        client.create(["sleep", "600"], name=name(f"b{i}"), parent=lead, kind="tool")
    with pytest.raises(LimitReached) as e:
        client.create(["sleep", "600"], name=name("b2"), parent=lead, kind="tool")
    assert (e.value.code, e.value.limit, e.value.max, e.value.current) == ("LIMIT_REACHED", "breadth", 2, 2)
    assert len(client.children(lead)) == 3
    # The user raises the limit: the same request now succeeds, with no policy change.
    client.update_grant(lead, max_breadth=3)
    assert client.create(["sleep", "600"], name=name("b2"), parent=lead, kind="tool").ready


def test_a_wider_policy_is_refused_with_its_counterexample(client, lead, name, wider):
    with pytest.raises(PolicyExceedsParent) as e:
        client.create(["sleep", "600"], name=name("wide"), parent=lead, policy=wider)
    assert "example.com" in (e.value.counterexample or "") and e.value.hint
    check = client.check_policy(wider, parent=lead)
    assert check.verdict == "exceeds" and not check.within and "example.com" in (check.counterexample or "")
    assert client.check_policy(wider, boundary=wider).within
    assert len(client.children(lead)) == 1


def test_bad_input_names_its_field(client, lead, name):
    with pytest.raises(InvalidArgument) as e:
        client.create(["sleep", "600"], name=name("h"), parent=lead, env={"HOME": "/x"})
    assert e.value.field == "env"
    with pytest.raises(InvalidArgument) as e:
        client.get_file(lead, "out.txt", max_bytes=1 << 40)
    assert e.value.field == "max_bytes"


def test_grants_from_the_host(client, name):
    bare = client.create(["sleep", "600"], name=name("bare"))
    try:
        with pytest.raises(NotFound):
            client.get_grant(bare)
        with pytest.raises(NotAllowed) as e:
            client.create(["sleep", "600"], name=name("c"), parent=bare)
        assert e.value.reason == "no_grant"
        made = client.create_grant(bare, GrantSpec(2, 1, 1, "30m", "/usr/bin/python3", rate="20/s"))
        assert (made.state, made.max_depth, made.root, made.rate) == ("live", 2, bare.name, "20/s")
        assert made.program_resolved and made.program_resolved.startswith("/usr/bin/python3")
        got = client.get_grant(bare)
        assert got.id == made.id and got.expires_at is not None
        raised = client.update_grant(bare, max_total=2, tool_idle_seconds=60)
        assert (raised.max_total, raised.tool_idle_seconds, raised.max_depth) == (2, 60, 2)
        revoked = client.revoke_grant(bare)
        assert revoked.state == "revoked"
        with pytest.raises(NotAllowed):
            client.create(["sleep", "600"], name=name("c"), parent=bare)
    finally:
        client.delete(bare)


def test_files_of_an_agent_child(client, lead, name):
    script = 'printf "hello file" > .o && mv .o out.txt; printf "\\377\\000" > .b && mv .b blob; exec sleep 600'
    agent = client.create(["sh", "-c", script], name=name("agent"), parent=lead)
    for _ in range(100):
        try:
            text = client.get_file(agent, "out.txt")
            blob = client.get_file(agent, "blob")
            break
        except NotFound:
            pass
    assert (text.text(), text.size) == ("hello file", 10) and text.path.endswith("out.txt")
    assert blob.content == b"\xff\x00"
    with pytest.raises(LimitReached) as e:
        client.get_file(agent, "out.txt", max_bytes=4)
    assert e.value.code == "LIMIT_REACHED"


def test_watch_and_wait_ready(client, lead, name):
    child = client.create(["sleep", "600"], name=name("slow"), parent=lead, wait=False)
    assert child.phase in ("PROVISIONING", "READY")
    phases = [s.phase for s in client.watch(child)]
    assert phases[-1] == "READY" and len(phases) == len(set(phases))
    assert client.wait_ready(child).ready
    client.stop(child)
    with pytest.raises(NotReady) as e:
        client.wait_ready(child)
    assert e.value.phase == "STOPPED" and isinstance(e.value, Unavailable)


def test_the_async_client_fans_out(lead, name):
    async def main():
        async with AsyncSandboxClient() as c:
            made = await asyncio.gather(
                *(c.create(["sleep", "600"], name=name(f"a{i}"), parent=lead.name, kind="tool") for i in range(2))
            )
            outs = await asyncio.gather(*(c.exec(m, ["echo", m.name]) for m in made))
            return [m.phase for m in made], [o.stdout.strip() for o in outs]

    phases, outs = asyncio.run(main())
    assert phases == ["READY", "READY"] and outs == [name("a0"), name("a1")]


def test_the_token_comes_from_the_cli_config_file(monkeypatch, tmp_path):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"endpoint": os.environ["OPENSHELL_ENDPOINT"], "user": "u",
                                  "token": os.environ["OPENSHELL_TOKEN"]}))
    monkeypatch.setenv("OPENSHELL_CONFIG", str(config))
    monkeypatch.delenv("OPENSHELL_TOKEN")
    monkeypatch.delenv("OPENSHELL_ENDPOINT")
    with SandboxClient() as c:
        assert c.whoami().kind == "user"


def test_a_wrong_token_and_a_missing_gateway(monkeypatch):
    with SandboxClient(os.environ["OPENSHELL_ENDPOINT"], token="not-a-real-token") as c:
        with pytest.raises(Unauthenticated):
            c.whoami()
    with SandboxClient("http://127.0.0.1:9", token="t", timeout=5) as c:
        with pytest.raises(Unavailable) as e:
            c.whoami()
        assert "127.0.0.1:9" in e.value.message
