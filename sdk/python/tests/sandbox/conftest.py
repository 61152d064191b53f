"""The in-sandbox suites: run inside a lead sandbox by the program its grant names, reaching
the gateway only through the door (tests/e2e/python_sdk.rs creates the leads and runs these)."""

import os

import pytest

if not os.environ.get("OPENSHELL_SANDBOX_ID"):
    pytest.skip("the in-sandbox suites run inside an OpenShell sandbox", allow_module_level=True)

