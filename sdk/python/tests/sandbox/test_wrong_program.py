"""Inside a lead whose grant names another program (tests/e2e/python_sdk.rs: /usr/bin/env):
Python is not it, so its creates are refused, naming the program (the e2e test then checks
that the tree is still the lead alone)."""

import pytest

from openshell_delegation import NotAllowed


def test_the_wrong_program_is_refused_naming_it(client, name):
    with pytest.raises(NotAllowed) as e:
        client.create(["sleep", "600"], name=name("c"), kind="tool")
    assert e.value.reason == "program" and e.value.code == "NOT_ALLOWED"
    assert e.value.details["program"].startswith("/usr/bin/python3")
    assert e.value.details["grant_program"] == "/usr/bin/env"
    assert "not the one the grant allows" in e.value.message
    # Refusals are not remembered: the same request is refused again, not replayed.
    with pytest.raises(NotAllowed):
        client.create(["sleep", "600"], name=name("c"), kind="tool", request_id=name("r"))
    with pytest.raises(NotAllowed):
        client.create(["sleep", "600"], name=name("c"), kind="tool", request_id=name("r"))
