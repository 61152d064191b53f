"""Fixtures every suite shares: a client (the host and sandbox suites), unique sandbox names
and a policy wider than any lead's."""

import uuid

import pytest

from openshell_delegation import SandboxClient


@pytest.fixture
def client():
    """A client for where the suite runs (the host suite: gRPC; the sandbox suites: the door)."""
    with SandboxClient() as c:
        yield c


@pytest.fixture
def name():
    """Unique names for this test's sandboxes (names are unique per user)."""
    run = uuid.uuid4().hex[:6]
    return lambda what: f"{what}-{run}"


@pytest.fixture
def wider():
    """Network access to a host no lead in the suites grants: any child with it exceeds."""
    return """version: 1
filesystem_policy:
  read_only: [/usr, /lib, /proc, /dev/urandom, /etc]
  read_write: [/tmp]
network_policies:
  anywhere:
    endpoints:
      - host: example.com
        port: 443
    binaries:
      - path: /usr/bin/curl
"""
