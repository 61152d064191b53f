"""Generated from proto/openshell/v1/gateway.proto by scripts/generate_proto.py."""
