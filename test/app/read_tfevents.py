#!/usr/bin/python3
"""An event-file reader independent of titan_train's C++: checks a TensorFlow event file the
way TensorBoard reads one and prints what it holds, one JSON object a line:

    {"step": 3, "tag": "loss", "value": 2.5}            a scalar (simple_value, float32)
    {"step": 0, "tag": "config", "text": "```yaml..."}  a text of the text plugin

    test/app/read_tfevents.py EVENT_FILE

Every record's length CRC and data CRC are checked with Debian's python3-crc32c, and every
record is parsed as an Event with Debian's python3-protobuf, from app/metrics/tensorboard/
tensorboard_event.proto compiled by protoc at run time into a temporary folder. The first
record must carry the file version; every later one a Summary. Any violation: one line on
stderr starting "read_tfevents: error:", exit 1. A missing package: exit 2, naming it.
Run it with Debian's /usr/bin/python3 (where apt installs the two modules).
"""
import importlib
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

PROTO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "app", "metrics",
                     "tensorboard", "tensorboard_event.proto")


def fail(message, code=1):
    print(f"read_tfevents: error: {message}", file=sys.stderr)
    sys.exit(code)


def need(module, package):
    try:
        return importlib.import_module(module)
    except ImportError:
        fail(f"the Python module '{module}' is missing for {sys.executable}; install the Debian "
             f"package {package} (scripts/setup.sh --tests installs it)", 2)


def masked(crc):
    # TFRecord's mask (tensorflow/core/lib/hash/crc32c.h): rotate right by 15, add a constant.
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(data, crc32c):
    """Yields each record's data, checking the framing: u64 length, u32 masked CRC of the
    length bytes, data, u32 masked CRC of the data (little endian)."""
    at = 0
    index = 0
    while at < len(data):
        if len(data) - at < 12:
            fail(f"record {index} at byte {at}: {len(data) - at} bytes left, a header needs 12")
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        if length_crc != masked(crc32c(header)):
            fail(f"record {index} at byte {at}: length CRC {length_crc:#010x}, expected "
                 f"{masked(crc32c(header)):#010x}")
        body = data[at + 12:at + 12 + length]
        if len(body) != length or len(data) < at + 16 + length:
            fail(f"record {index} at byte {at}: truncated (length {length})")
        (data_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if data_crc != masked(crc32c(body)):
            fail(f"record {index} at byte {at}: data CRC {data_crc:#010x}, expected "
                 f"{masked(crc32c(body)):#010x}")
        yield body
        at += 16 + length
        index += 1


def compile_proto(folder):
    try:
        subprocess.run(["protoc", f"--proto_path={os.path.dirname(PROTO)}",
                        f"--python_out={folder}", PROTO], check=True)
    except FileNotFoundError:
        fail("protoc is missing; install the Debian package protobuf-compiler "
             "(scripts/setup.sh --tests installs it)", 2)
    except subprocess.CalledProcessError as e:
        fail(f"protoc could not compile {PROTO} (exit {e.returncode})")
    sys.path.insert(0, folder)
    return importlib.import_module("tensorboard_event_pb2")


def main():
    if len(sys.argv) != 2:
        fail("usage: read_tfevents.py EVENT_FILE")
    sys.stdout.reconfigure(encoding="utf-8")  # texts are UTF-8 whatever the locale
    crc32c = need("crc32c", "python3-crc32c").crc32c
    need("google.protobuf", "python3-protobuf")
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    with tempfile.TemporaryDirectory() as folder:
        pb = compile_proto(folder)
        for index, body in enumerate(records(data, crc32c)):
            event = pb.Event()
            try:
                event.ParseFromString(body)
            except Exception as e:  # DecodeError, named differently across versions
                fail(f"record {index}: not an Event ({e})")
            if not (math.isfinite(event.wall_time) and event.wall_time > 0):
                fail(f"record {index}: wall_time {event.wall_time}, expected seconds since 1970")
            what = event.WhichOneof("what")
            if index == 0:
                if what != "file_version" or not event.file_version.startswith("brain.Event:"):
                    fail(f"record 0: {what} '{event.file_version}', expected file_version "
                         "'brain.Event:2'")
                continue
            if what != "summary":
                fail(f"record {index}: {what}, expected a summary")
            for value in event.summary.value:
                print_value(index, event.step, value, pb)
        if not data:
            fail("empty file: not even the file_version record")


def print_value(index, step, value, pb):
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        print(json.dumps({"step": step, "tag": value.tag, "value": value.simple_value}))
    elif kind == "tensor":
        plugin = value.metadata.plugin_data.plugin_name
        tensor = value.tensor
        if plugin != "text" or tensor.dtype != pb.DT_STRING or len(tensor.string_val) != 1:
            fail(f"record {index}: tag '{value.tag}' plugin '{plugin}' dtype {tensor.dtype} with "
                 f"{len(tensor.string_val)} strings, expected a text: plugin 'text', DT_STRING, "
                 "one string")
        if any(d.size != 1 for d in tensor.tensor_shape.dim):
            fail(f"record {index}: text shape {[d.size for d in tensor.tensor_shape.dim]}, "
                 "expected [] or [1]")
        text = tensor.string_val[0].decode("utf-8")
        print(json.dumps({"step": step, "tag": value.tag, "text": text}, ensure_ascii=False))
    else:
        fail(f"record {index}: tag '{value.tag}' holds {kind}, expected simple_value or tensor")


if __name__ == "__main__":
    main()
