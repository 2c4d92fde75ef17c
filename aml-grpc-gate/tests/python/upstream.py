"""The test upstream: a Python grpcio server of payments.v1.Payments, its types built from a
descriptor set file, with server reflection. Every request it receives is logged, as the raw
bytes it got (hex), one JSON line per request, to LOG.

Usage: upstream.py DESCRIPTORS.pb LOG
Prints {"listening": PORT} once serving.
"""
import json
import sys
from concurrent import futures

import grpc
from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message_factory
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_reflection.v1alpha import reflection
from grpc_status import rpc_status


def main() -> None:
    descriptors, log_path = sys.argv[1], sys.argv[2]
    files = descriptor_pb2.FileDescriptorSet.FromString(open(descriptors, "rb").read())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    cls = lambda name: message_factory.GetMessageClass(pool.FindMessageTypeByName("payments.v1." + name))
    Refund, RefundReply = cls("RefundRequest"), cls("RefundReply")
    Lookup, LookupReply = cls("LookupRequest"), cls("LookupReply")
    Watch, OrderEvent = cls("WatchRequest"), cls("OrderEvent")
    log = open(log_path, "a", buffering=1)

    def logged(method, raw, context):
        # time_remaining: the deadline the gateway passed on (None without one).
        log.write(json.dumps({"method": method, "hex": raw.hex(), "time_remaining": context.time_remaining(),
                              "x_request_id": dict(context.invocation_metadata()).get("x-request-id"),
                              "x_secret": dict(context.invocation_metadata()).get("x-secret")}) + "\n")
        log.flush()

    def refund(raw, context):
        logged("Refund", raw, context)
        request = Refund.FromString(raw)
        return RefundReply(refund_id="R-" + request.order_id, amount_minor=request.amount_minor).SerializeToString()

    def lookup(raw, context):
        logged("Lookup", raw, context)
        request = Lookup.FromString(raw)
        if request.order_id == "A-404":
            info = error_details_pb2.ResourceInfo(resource_type="order", resource_name=request.order_id,
                                                  description="no such order")
            detail = any_pb2.Any()
            detail.Pack(info)
            context.abort_with_status(rpc_status.to_status(status_pb2.Status(
                code=code_pb2.NOT_FOUND, message="order A-404 not found", details=[detail])))
        return LookupReply(order_id=request.order_id, cursor=request.cursor, state="open").SerializeToString()

    def cancel(raw, context):
        logged("Cancel", raw, context)
        return LookupReply(state="cancelled").SerializeToString()

    def watch(raw, context):
        logged("Watch", raw, context)
        request = Watch.FromString(raw)
        for seq in range(request.count):
            yield OrderEvent(order_id=request.order_id, seq=seq).SerializeToString()

    handlers = {
        "Refund": grpc.unary_unary_rpc_method_handler(refund),
        "Lookup": grpc.unary_unary_rpc_method_handler(lookup),
        "Cancel": grpc.unary_unary_rpc_method_handler(cancel),
        "Watch": grpc.unary_stream_rpc_method_handler(watch),
    }
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("payments.v1.Payments", handlers),))
    reflection.enable_server_reflection(("payments.v1.Payments", reflection.SERVICE_NAME), server, pool=pool)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(json.dumps({"listening": port}), flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
