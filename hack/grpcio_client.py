#!/usr/bin/env python3
"""A grpc-core client (Python grpcio) against bosun's CRI socket, for the integration tests.

grpc-core sends the socket path percent-encoded as :authority (issue 16 item 10). No generated
stubs: requests and answers are the few protobuf fields needed, encoded here by hand.

Usage: grpcio_client.py SOCKET
Prints one JSON object per call: {"call", "code", "message" (cut), "runtime_name"?}.
"""

import json
import sys

import grpc


def field_bytes(number, data):
    """A length-delimited protobuf field."""
    out = bytes([number << 3 | 2])
    n = len(data)
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out + data


def string_fields(msg):
    """The length-delimited fields of a protobuf message: {number: bytes}."""
    out, i = {}, 0
    while i < len(msg):
        key = msg[i]
        i += 1
        shift, n = 0, 0
        while True:
            b = msg[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if key & 7 != 2:
            return out
        out[key >> 3] = msg[i:i + n]
        i += n
    return out


def main():
    socket = sys.argv[1]
    with grpc.insecure_channel("unix:" + socket) as channel:
        calls = [
            ("Version", "/runtime.v1.RuntimeService/Version", b""),
            ("Version", "/runtime.v1.RuntimeService/Version", b""),
            ("ListPodSandbox", "/runtime.v1.RuntimeService/ListPodSandbox", b""),
            ("ContainerStatus", "/runtime.v1.RuntimeService/ContainerStatus",
             field_bytes(1, b"f" * (64 << 10))),
        ]
        for name, method, request in calls:
            call = channel.unary_unary(method)
            result = {"call": name}
            try:
                answer = call(request, timeout=20)
                result["code"] = "OK"
                if name == "Version":
                    result["runtime_name"] = string_fields(answer).get(2, b"").decode()
            except grpc.RpcError as e:
                result["code"] = e.code().name
                result["message"] = (e.details() or "")[:300]
                result["message_len"] = len(e.details() or "")
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
