"""OpenShell delegation gateway SDK: create and drive sandboxes within a tree's grant, the
same script on the host (gRPC with your login) and inside a sandbox (MCP through its door).

    from openshell_delegation import SandboxClient

    with SandboxClient() as client:
        worker = client.create(["sleep", "600"], kind="tool")
        print(client.exec(worker, ["echo", "hello"]).stdout)
        client.stop(worker)

See docs/python-sdk.md in the repository.
"""

from ._version import VERSION
from .client import AsyncSandboxClient, in_sandbox
from .errors import (
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
from .sync import SandboxClient
from .types import ExecResult, File, Grant, GrantSpec, Limits, PolicyCheck, Sandbox, Template, WhoAmI

__version__ = VERSION

__all__ = [
    "AsyncSandboxClient",
    "Conflict",
    "ExecResult",
    "File",
    "Grant",
    "GrantSpec",
    "HostOnly",
    "InvalidArgument",
    "LimitReached",
    "Limits",
    "NotAllowed",
    "NotFound",
    "NotReady",
    "OpenShellError",
    "PolicyCheck",
    "PolicyExceedsParent",
    "PolicyUnprovable",
    "Sandbox",
    "SandboxClient",
    "Template",
    "Unauthenticated",
    "Unavailable",
    "WhoAmI",
    "__version__",
    "in_sandbox",
]
