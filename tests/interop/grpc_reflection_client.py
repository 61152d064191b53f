"""A generic gRPC client that knows nothing of our protos: it discovers the gateway's
services through server reflection, builds messages from the reflected descriptors, and
calls Health.GetStatus (no credential) and Users.WhoAmI (with a bearer token).

usage: grpc_reflection_client.py HOST:PORT TOKEN
prints one JSON object with what it found.
"""
import json
import sys

import grpc
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)


def call(channel, pool, method_path, token=None):
    service_name, method_name = method_path.rsplit(".", 1)
    method = pool.FindServiceByName(service_name).FindMethodByName(method_name)
    request_cls = message_factory.GetMessageClass(method.input_type)
    response_cls = message_factory.GetMessageClass(method.output_type)
    stub = channel.unary_unary(
        f"/{service_name}/{method_name}",
        request_serializer=request_cls.SerializeToString,
        response_deserializer=response_cls.FromString,
    )
    metadata = [("authorization", f"Bearer {token}")] if token else None
    try:
        reply = stub(request_cls(), metadata=metadata, timeout=10)
        return {"ok": json_format.MessageToDict(reply, preserving_proto_field_name=True)}
    except grpc.RpcError as e:
        return {"error": e.code().name, "message": e.details()}


def main():
    target, token = sys.argv[1], sys.argv[2]
    channel = grpc.insecure_channel(target)
    db = ProtoReflectionDescriptorDatabase(channel)
    pool = descriptor_pool.DescriptorPool(db)
    result = {
        "services": sorted(db.get_services()),
        "status": call(channel, pool, "openshell.v1.Health.GetStatus"),
        "whoami": call(channel, pool, "openshell.v1.Users.WhoAmI", token),
        "whoami_anonymous": call(channel, pool, "openshell.v1.Users.WhoAmI"),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
