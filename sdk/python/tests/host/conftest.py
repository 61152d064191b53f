"""The host suite: run against a real gateway named by OPENSHELL_ENDPOINT, as the user whose
login is OPENSHELL_TOKEN (tests/e2e/python_sdk.rs starts one and runs this)."""

import os

import pytest

from openshell_delegation import GrantSpec, OpenShellError

if not os.environ.get("OPENSHELL_ENDPOINT") or not os.environ.get("OPENSHELL_TOKEN"):
    pytest.skip("the host suite needs OPENSHELL_ENDPOINT and OPENSHELL_TOKEN of a gateway", allow_module_level=True)


@pytest.fixture
def lead(client, name):
    """A lead (root) with a grant of depth 1, breadth 2, total 3; deleted with its tree after."""
    made = client.create(["sleep", "600"], name=name("lead"), grant=GrantSpec(1, 2, 3, "1h", "/usr/bin/python3"))
    yield made
    try:
        client.delete(made)
    except OpenShellError:
        pass
