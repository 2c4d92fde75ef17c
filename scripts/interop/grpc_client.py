"""Python grpcio client of aml.v1.ToolService, with message types discovered by server
reflection (v1alpha, as grpcio-reflection speaks it).

Usage: grpc_client.py HOST:PORT
Prints one JSON object: the dispatched call, the denied call's status and ErrorInfo, the
health status, the services reflection lists, and the fields of google.rpc.ErrorInfo as
reflection describes it.
"""
import json
import sys

import grpc
from google.protobuf import descriptor_pool, message_factory
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from grpc_status import rpc_status


def main() -> None:
    channel = grpc.insecure_channel(sys.argv[1])
    database = ProtoReflectionDescriptorDatabase(channel)
    services = sorted(database.get_services())
    pool = descriptor_pool.DescriptorPool(database)
    request_type = message_factory.GetMessageClass(pool.FindMessageTypeByName("aml.v1.CallToolRequest"))
    response_type = message_factory.GetMessageClass(pool.FindMessageTypeByName("aml.v1.CallToolResponse"))
    call_tool = channel.unary_unary(
        "/aml.v1.ToolService/CallTool",
        request_serializer=request_type.SerializeToString,
        response_deserializer=response_type.FromString,
    )

    out = {"services": services}
    error_info = pool.FindMessageTypeByName("google.rpc.ErrorInfo")
    out["reflected_error_info_fields"] = [field.name for field in error_info.fields]
    ok = call_tool(request_type(tool="fetch_record", arguments_json=json.dumps({"id": 42})))
    out["dispatched"] = {
        "result": json.loads(ok.result_json),
        "receipt_reason": ok.receipt.reason,
        "execution_status": ok.receipt.execution_status,
    }
    try:
        call_tool(request_type(tool="fetch_record", arguments_json=json.dumps({"id": 7})))
        out["denied"] = "no error"
    except grpc.RpcError as error:
        status = rpc_status.from_call(error)
        info = error_details_pb2.ErrorInfo()
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                detail.Unpack(info)
        out["denied"] = {
            "code": error.code().name,
            "reason": info.reason,
            "domain": info.domain,
            "receipt": json.loads(info.metadata["receipt"]),
        }
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="aml.v1.ToolService"))
    out["health"] = health_pb2.HealthCheckResponse.ServingStatus.Name(health.status)
    print(json.dumps(out))


main()
