"""Where the SDK runs and how it reaches the gateway from there.

Inside a sandbox its supervisor sets ``OPENSHELL_SANDBOX_ID`` and ``OPENSHELL_SANDBOX_NAME``
(names no creator may set) and serves the door at ``http://openshell.local/mcp``, through the
egress proxy the sandbox's ``HTTP_PROXY`` names: nothing else is needed there, and there is no
token to find. On the host the CLI's rules apply: the endpoint from ``OPENSHELL_ENDPOINT``, else
the CLI's config file, else ``http://127.0.0.1:7570``; the token from ``OPENSHELL_TOKEN``, else
the config file (``$OPENSHELL_CONFIG``, else ``$XDG_CONFIG_HOME/openshell/config.json``, else
``~/.config/openshell/config.json``, written by ``openshell gateway start``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import InvalidArgument, Unauthenticated

__all__ = ["DEFAULT_ENDPOINT", "DOOR_URL", "HostConfig", "SandboxIdentity", "config_path", "host_config", "sandbox_identity"]

DOOR_URL = "http://openshell.local/mcp"
DEFAULT_ENDPOINT = "http://127.0.0.1:7570"


@dataclass(frozen=True)
class SandboxIdentity:
    id: str
    name: str


def sandbox_identity(environ: Mapping[str, str] | None = None) -> SandboxIdentity | None:
    """The sandbox this process runs in, from what its supervisor set; None on the host."""
    env = os.environ if environ is None else environ
    sandbox_id = env.get("OPENSHELL_SANDBOX_ID", "")
    if not sandbox_id:
        return None
    return SandboxIdentity(id=sandbox_id, name=env.get("OPENSHELL_SANDBOX_NAME", ""))


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """The CLI's config file (the same order as crates/gateway/src/client_config.rs)."""
    env = os.environ if environ is None else environ
    if env.get("OPENSHELL_CONFIG"):
        return Path(env["OPENSHELL_CONFIG"])
    if env.get("XDG_CONFIG_HOME"):
        base = Path(env["XDG_CONFIG_HOME"])
    elif env.get("HOME"):
        base = Path(env["HOME"]) / ".config"
    else:
        base = Path(".")
    return base / "openshell" / "config.json"


@dataclass(frozen=True)
class HostConfig:
    endpoint: str
    token: str = ""

    def __repr__(self) -> str:
        return f"HostConfig(endpoint={self.endpoint!r}, token=<redacted>)"

    @property
    def target(self) -> str:
        """host:port, as gRPC dials it."""
        return self.endpoint.removeprefix("http://").rstrip("/")


def _read_config(path: Path) -> dict[str, str]:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise InvalidArgument(f"config: cannot read {path}: {e.strerror}", details={"field": "config"}) from None
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise InvalidArgument(f"config: {path} is not JSON: {e}", details={"field": "config"}) from None
    if not isinstance(data, dict):
        raise InvalidArgument(f"config: {path} is not a JSON object", details={"field": "config"})
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def host_config(
    endpoint: str | None = None, token: str | None = None, environ: Mapping[str, str] | None = None
) -> HostConfig:
    """The endpoint and token for gRPC from the host: arguments, then the environment, then
    the CLI's config file. Refused with a message saying what to do when there is no token."""
    env = os.environ if environ is None else environ
    endpoint = endpoint or env.get("OPENSHELL_ENDPOINT") or None
    token = token or env.get("OPENSHELL_TOKEN") or None
    if endpoint is None or token is None:
        saved = _read_config(config_path(env))
        endpoint = endpoint or saved.get("endpoint") or DEFAULT_ENDPOINT
        token = token or saved.get("token") or None
    if not endpoint.startswith("http://"):
        why = "https is not supported: the gateway listens on http://" if endpoint.startswith("https://") else (
            "must start with http://"
        )
        raise InvalidArgument(f"endpoint {endpoint}: {why}", details={"field": "endpoint"})
    if not endpoint.removeprefix("http://").strip("/"):
        raise InvalidArgument(f"endpoint {endpoint}: names no host", details={"field": "endpoint"})
    if token is None:
        raise Unauthenticated(
            f"no login token: set OPENSHELL_TOKEN, pass token=..., or start a gateway with "
            f"`openshell gateway start` (it writes {config_path(env)})",
            details={"field": "token"},
        )
    if not token.isascii() or not token.isprintable():
        raise InvalidArgument("token: not a valid token (printable ASCII only)", details={"field": "token"})
    return HostConfig(endpoint=endpoint, token=token)
