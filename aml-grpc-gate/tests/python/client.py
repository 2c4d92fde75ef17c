"""A Python grpcio client of the gateway, with every message type learned from the
gateway's server reflection (nothing generated, no descriptor file).

Usage: client.py TARGET COMMAND ARGS...
  call METHOD JSON [TIMEOUT]     a unary call; the request given as proto3 JSON
  raw METHOD HEX                 a unary call whose request is the given bytes
  stream METHOD JSON             a server-streaming call
  approve PAGE_URL METHOD JSON   a unary call, approved on the approval page's JSON API
  cancel PAGE_URL METHOD JSON    a unary call cancelled once the page shows it pending
  services                       what reflection lists, and health
Prints one JSON object: code, response (proto3 JSON, proto field names), the request's own
encoding (sent_hex), the answer's metadata, ErrorInfo and other details.
"""
import json
import sys
import threading
import time
import urllib.request

import grpc
from google.protobuf import descriptor_pool, json_format, message_factory
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from grpc_status import rpc_status


def types(pool, method):
    service, name = method.split("/")
    found = pool.FindServiceByName(service).FindMethodByName(name)
    return (message_factory.GetMessageClass(found.input_type),
            message_factory.GetMessageClass(found.output_type))


def metadata(call):
    out = {}
    for pairs in (call.initial_metadata() or (), call.trailing_metadata() or ()):
        for key, value in pairs:
            if key == "aml-receipt-bin":
                out[key] = json.loads(value)
            elif not key.endswith("-bin"):
                out[key] = value
    return out


def failure(error):
    out = {"code": error.code().name, "message": error.details(), "metadata": metadata(error)}
    status = rpc_status.from_call(error)
    if status is not None:
        out["details"] = []
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                out["error_info"] = {"reason": info.reason, "domain": info.domain, "metadata": dict(info.metadata)}
            elif detail.Is(error_details_pb2.ResourceInfo.DESCRIPTOR):
                info = error_details_pb2.ResourceInfo()
                detail.Unpack(info)
                out["details"].append({"resource_info": json_format.MessageToDict(info, preserving_proto_field_name=True)})
            else:
                out["details"].append({"type_url": detail.type_url})
    return out


def unary(channel, pool, method, request_json, timeout):
    request_type, response_type = types(pool, method)
    request = json_format.Parse(request_json, request_type())
    stub = channel.unary_unary("/" + method, request_serializer=request_type.SerializeToString,
                               response_deserializer=response_type.FromString)
    out = {"sent_hex": request.SerializeToString().hex()}
    try:
        sent = (("x-request-id", "req-7"), ("x-secret", "not forwarded"))
        response, call = stub.with_call(request, timeout=timeout, metadata=sent)
        out.update(code="OK", metadata=metadata(call),
                   response=json_format.MessageToDict(response, preserving_proto_field_name=True))
    except grpc.RpcError as error:
        out.update(failure(error))
    return out


def raw(channel, method, hex_bytes):
    stub = channel.unary_unary("/" + method)
    try:
        response, call = stub.with_call(bytes.fromhex(hex_bytes), timeout=10)
        return {"code": "OK", "response_hex": response.hex()}
    except grpc.RpcError as error:
        return failure(error)


def approve(page, decided):
    origin, token = page.split("/?t=")
    headers = {"Authorization": "Bearer " + token}
    deadline = time.time() + 20
    while time.time() < deadline:
        with urllib.request.urlopen(urllib.request.Request(origin + "/api/v1/pending", headers=headers)) as answer:
            pending = json.load(answer)["pending"]
        if pending:
            first = pending[0]
            body = json.dumps({"grant_id": first["grant_id"], "proposal_sha256": first["proposal_sha256"],
                               "decision": "approve"}).encode()
            request = urllib.request.Request(origin + "/api/v1/decide", data=body, method="POST", headers=dict(
                headers, **{"Origin": origin, "Content-Type": "application/json"}))
            with urllib.request.urlopen(request) as answer:
                decided["outcome"] = json.load(answer)["outcome"]["outcome"]
                decided["proposal_sha256"] = first["proposal_sha256"]
                decided["arguments"] = first["arguments"]
            return
        time.sleep(0.05)  # polling the page's API: the request appears when the gate asks
    decided["outcome"] = "nothing pending in 20 s"


def pending(page):
    origin, token = page.split("/?t=")
    request = urllib.request.Request(origin + "/api/v1/pending", headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(request) as answer:
        return json.load(answer)["pending"]


def cancel(channel, pool, page, method, request_json):
    request_type, response_type = types(pool, method)
    stub = channel.unary_unary("/" + method, request_serializer=request_type.SerializeToString,
                               response_deserializer=response_type.FromString)
    future = stub.future(json_format.Parse(request_json, request_type()), timeout=30)
    deadline = time.time() + 20
    while not pending(page) and time.time() < deadline:
        time.sleep(0.05)  # polling the page's API until the gate asks
    was_pending = bool(pending(page))
    future.cancel()
    while pending(page) and time.time() < deadline:
        time.sleep(0.05)  # polling until the gate withdraws the request
    return {"was_pending": was_pending, "cancelled": future.cancelled(), "still_pending": bool(pending(page))}


def main() -> None:
    target, command, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    channel = grpc.insecure_channel(target)
    pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
    if command == "call":
        timeout = float(args[2]) if len(args) > 2 else 10
        out = unary(channel, pool, args[0], args[1], timeout)
    elif command == "raw":
        out = raw(channel, args[0], args[1])
    elif command == "stream":
        request_type, response_type = types(pool, args[0])
        stub = channel.unary_stream("/" + args[0], request_serializer=request_type.SerializeToString,
                                    response_deserializer=response_type.FromString)
        try:
            events = [json_format.MessageToDict(m, preserving_proto_field_name=True)
                      for m in stub(json_format.Parse(args[1], request_type()), timeout=10)]
            out = {"code": "OK", "events": events}
        except grpc.RpcError as error:
            out = failure(error)
    elif command == "approve":
        decided = {}
        approver = threading.Thread(target=approve, args=(args[0], decided))
        approver.start()
        out = unary(channel, pool, args[1], args[2], 30)
        approver.join()
        out["approval"] = decided
    elif command == "cancel":
        out = cancel(channel, pool, args[0], args[1], args[2])
    elif command == "services":
        health = health_pb2_grpc.HealthStub(channel)
        names = sorted(ProtoReflectionDescriptorDatabase(channel).get_services())
        out = {"services": names, "health": {}}
        for name in ["", "payments.v1.Payments"]:
            status = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10).status
            out["health"][name] = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
    else:
        raise SystemExit("unknown command " + command)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
