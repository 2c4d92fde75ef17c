"""Python grpcio calls of aml.v1.ToolService that give up, for the cancellation tests.
Message types are discovered by server reflection, as a new user's client would.

Usage: grpc_calls.py HOST:PORT MODE TOOL ARGUMENTS_JSON
  call      call and wait for the answer
  cancel    start the call, print {"started": true}, wait for a line on stdin, cancel it
  deadline  call with a 0.5 s deadline
  hang      start the call, print {"started": true}, then wait to be killed
Prints one JSON object per step: the status code and, when the server attached one, the
google.rpc.ErrorInfo (reason, detail size, detail_truncated, receipt).
"""
import json
import sys
import time

import grpc
from google.protobuf import descriptor_pool, message_factory
from google.rpc import error_details_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from grpc_status import rpc_status


def emit(value):
    print(json.dumps(value), flush=True)


def error_info(error):
    status = rpc_status.from_call(error)
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            receipt = info.metadata.get("receipt")
            return {
                "reason": info.reason,
                "domain": info.domain,
                "detail_bytes": len(info.metadata.get("detail", "").encode()),
                "detail_truncated": info.metadata.get("detail_truncated") == "true",
                "receipt": json.loads(receipt) if receipt else None,
            }
    return None


def outcome(future):
    try:
        response = future.result()
        return {"code": "OK", "receipt_reason": response.receipt.reason}
    except grpc.FutureCancelledError:
        return {"code": "CANCELLED", "error_info": None}
    except grpc.RpcError as error:
        return {"code": error.code().name, "error_info": error_info(error)}


def main():
    address, mode, tool, arguments = sys.argv[1:5]
    channel = grpc.insecure_channel(address)
    pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
    request_type = message_factory.GetMessageClass(pool.FindMessageTypeByName("aml.v1.CallToolRequest"))
    response_type = message_factory.GetMessageClass(pool.FindMessageTypeByName("aml.v1.CallToolResponse"))
    call_tool = channel.unary_unary(
        "/aml.v1.ToolService/CallTool",
        request_serializer=request_type.SerializeToString,
        response_deserializer=response_type.FromString,
    )
    request = request_type(tool=tool, arguments_json=arguments)
    if mode == "call":
        emit(outcome(call_tool.future(request)))
    elif mode == "deadline":
        emit(outcome(call_tool.future(request, timeout=0.5)))
    elif mode in ("cancel", "hang"):
        future = call_tool.future(request)
        emit({"started": True})
        if mode == "hang":
            while True:
                time.sleep(60)
        sys.stdin.readline()
        emit({"cancel_accepted": future.cancel()})
        emit(outcome(future))
    else:
        raise SystemExit(f"unknown mode {mode!r}")


main()
