"""The checked-in gRPC code is what the generator makes of today's proto."""

import subprocess
import sys
from pathlib import Path

SDK = Path(__file__).resolve().parents[2]
SCRIPT = SDK / "scripts" / "generate_proto.py"
CHECKED_IN = SDK / "src" / "openshell_delegation" / "_proto"


def test_generated_code_matches_the_proto(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    for name in ("gateway_pb2.py", "gateway_pb2.pyi", "gateway_pb2_grpc.py"):
        fresh = (tmp_path / name).read_text()
        assert (CHECKED_IN / name).read_text() == fresh, (
            f"{name} is stale: run `.deps/py/bin/python sdk/python/scripts/generate_proto.py` and commit the result"
        )


def test_the_stubs_import_nothing_named_openshell():
    text = (CHECKED_IN / "gateway_pb2_grpc.py").read_text()
    assert "from openshell" not in text and "from . import gateway_pb2" in text
