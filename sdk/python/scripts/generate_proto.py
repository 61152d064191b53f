"""Regenerates the SDK's gRPC code from proto/openshell/v1/gateway.proto (checked in under
src/openshell_delegation/_proto/). Run after changing the proto, with the pinned generator:

    .deps/py/bin/python sdk/python/scripts/generate_proto.py            # rewrite the files
    .deps/py/bin/python sdk/python/scripts/generate_proto.py --out DIR  # write them to DIR

The descriptor keeps its name (openshell/v1/gateway.proto, as server reflection shows it);
the stubs import the messages relatively, so nothing named `openshell` is imported (that name
is upstream's package).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

GENERATOR = "1.85.1"
SDK = Path(__file__).resolve().parent.parent
REPO = SDK.parent.parent
PROTO = REPO / "proto"
TARGET = SDK / "src" / "openshell_delegation" / "_proto"
FILES = ("gateway_pb2.py", "gateway_pb2.pyi", "gateway_pb2_grpc.py")


def generate(out: Path) -> None:
    from grpc_tools import protoc

    try:
        from importlib.metadata import version

        have = version("grpcio-tools")
    except Exception:  # noqa: BLE001
        have = "unknown"
    if have != GENERATOR:
        sys.exit(f"grpcio-tools {have} is installed; the checked-in code comes from {GENERATOR} (pip install grpcio-tools=={GENERATOR})")
    import grpc_tools

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "protoc",
            f"-I{PROTO}",
            f"-I{well_known}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            "openshell/v1/gateway.proto",
        ]
        if protoc.main(args) != 0:
            sys.exit("protoc failed")
        made = Path(tmp) / "openshell" / "v1"
        out.mkdir(parents=True, exist_ok=True)
        for name in FILES:
            text = (made / name).read_text()
            if name == "gateway_pb2_grpc.py":
                text = text.replace(
                    "from openshell.v1 import gateway_pb2 as", "from . import gateway_pb2 as"
                )
            (out / name).write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write here instead of the package (the staleness test does)")
    args = parser.parse_args()
    out = args.out or TARGET
    generate(out)
    if args.out is None:
        init = TARGET / "__init__.py"
        if not init.exists():
            init.write_text('"""Generated from proto/openshell/v1/gateway.proto by scripts/generate_proto.py."""\n')
        print(f"wrote {', '.join(FILES)} to {out}")


if __name__ == "__main__":
    main()
