#!/usr/bin/env python3
"""What grpcurl does, with python3-grpcio alone (no .proto files, no generated code): list the
services through server reflection, fetch a service's descriptor, read grpc.health.v1 status.

  grpc_probe.py ADDR services          one service name a line
  grpc_probe.py ADDR describe SYMBOL   the .proto file names reflection returns for SYMBOL
  grpc_probe.py ADDR health [SERVICE]  SERVING, NOT_SERVING, ... or the gRPC error code
  grpc_probe.py ADDR stop-replica ID TERM [TOKEN]
                                       Node.StopReplica as a scheduler of Raft term TERM sends
                                       it: OK, or the gRPC error code and its message

The few protobuf messages involved are encoded by hand (field numbers from reflection.proto and
health.proto), so the test needs no protobuf compiler."""
import sys

import grpc

REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
HEALTH = "/grpc.health.v1.Health/Check"
STOP_REPLICA = "/exaserve.v1.Node/StopReplica"
STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def varint_field(number, value):
    return varint(number << 3) + varint(value)


def field(number, payload):  # a length-delimited field
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def fields(data):  # (number, value) of each field; value: int or bytes
    i = 0
    while i < len(data):
        key, i = read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = read_varint(data, i)
        elif wire == 2:
            size, i = read_varint(data, i)
            value, i = data[i:i + size], i + size
        else:
            raise ValueError(f"wire type {wire} not expected here")
        yield number, value


def read_varint(data, i):
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def reflect(channel, request):
    call = channel.stream_stream(REFLECTION, lambda b: b, lambda b: b)
    (response,) = list(call(iter([request]), timeout=10))
    return dict((n, v) for n, v in fields(response) if n in (4, 6, 7)), response


def main():
    addr, command, *rest = sys.argv[1:]
    channel = grpc.insecure_channel(addr)
    if command == "services":
        parts, _ = reflect(channel, field(7, b"*"))
        for n, v in fields(parts[6]):
            print(dict(fields(v))[1].decode())
    elif command == "describe":
        parts, raw = reflect(channel, field(4, rest[0].encode()))
        if 4 not in parts:
            sys.exit(f"no descriptor for {rest[0]}: {raw!r}")
        for n, proto in fields(parts[4]):
            print(dict(fields(proto))[1].decode())  # FileDescriptorProto.name
    elif command == "health":
        check = channel.unary_unary(HEALTH, lambda b: b, lambda b: b)
        try:
            response = check(field(1, (rest[0] if rest else "").encode()), timeout=5)
        except grpc.RpcError as e:
            print(e.code().name)
            return
        print(STATUS[dict(fields(response)).get(1, 0)])
    elif command == "stop-replica":
        # StopReplicaRequest: replica_id = 1, scheduler_term = 4 (proto/exaserve/v1/node.proto).
        request = field(1, rest[0].encode()) + varint_field(4, int(rest[1]))
        metadata = [("authorization", f"Bearer {rest[2]}")] if len(rest) > 2 else None
        stop = channel.unary_unary(STOP_REPLICA, lambda b: b, lambda b: b)
        try:
            stop(request, timeout=10, metadata=metadata)
        except grpc.RpcError as e:
            print(e.code().name, e.details())
            return
        print("OK")
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
