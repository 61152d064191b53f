"""The SDK's version (the package's, read by pyproject.toml; sent as the MCP client's)."""

VERSION = "0.1.0"
