"""TFRecord shards read without TensorFlow: the framing (length, masked CRC of the length, data, masked
CRC of the data) and the ``tf.train.Example`` this tool writes (``jobs.data.formats``): an int64
``image/index``, an int64 ``image/class/label`` and the bytes ``image/encoded``, parsed from the protobuf
wire format directly (three fields; no protobuf schema needed).

A record whose length cannot be read ends the shard, as TensorFlow's reader does; checksums are not
verified (TensorFlow's ``TFRecordDataset`` does not verify the data's either unless asked)."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

HEADER = 12  # uint64 length + uint32 masked CRC32C of the length
FOOTER = 4  # uint32 masked CRC32C of the data
OVERHEAD = HEADER + FOOTER  # framing bytes per record: part of what a run reads
READ_SIZE = 1 << 20  # bytes asked of the file system per read call


class BadRecord(ValueError):
    """A record is cut short or is not an Example of this tool's."""


def records(path: str, read_size: int = READ_SIZE) -> Iterator[tuple[bytes, int]]:
    """(serialized Example, bytes it took in the file) of every record of the shard at ``path``."""
    with open(path, "rb", buffering=read_size) as f:
        size = os.fstat(f.fileno()).st_size
        while True:
            head = f.read(HEADER)
            if not head:
                return
            if len(head) < HEADER:
                raise BadRecord(f"{path}: a record's header is cut short")
            (length,) = struct.unpack("<Q", head[:8])
            if length + FOOTER > size - f.tell():  # a damaged length: never ask for more than is there
                raise BadRecord(f"{path}: a record is cut short ({size - f.tell()} bytes left of {length})")
            data = f.read(length)
            if len(data) < length or len(f.read(FOOTER)) < FOOTER:
                raise BadRecord(f"{path}: a record is cut short ({len(data)} of {length} bytes)")
            yield data, length + OVERHEAD


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise BadRecord("a varint runs past the record")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of a protobuf message: an int for varints, bytes for the rest."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise BadRecord(f"wire type {wire} is not in an Example")
        yield number, wire, value


def _feature(buf: bytes) -> object:
    """A ``tf.train.Feature``: bytes_list (1) -> its first bytes; int64_list (3) -> its first int."""
    for number, _, value in _fields(buf):
        for inner, wire, item in _fields(value):
            if inner != 1:
                continue
            if number == 1:
                return item
            if number == 3:
                return _varint(item, 0)[0] if wire == 2 else item  # packed or not
    return None


def example(buf: bytes, payload: bool = True) -> tuple[int, int, bytes | None]:
    """(image index, label, encoded image) of one serialized Example this tool wrote; ``payload=False``
    (a read-only run): the image's bytes are not copied out (None)."""
    features: dict[str, object] = {}
    # fields are sliced out of a memoryview: the image's bytes are copied once, at the end, not at every
    # level of nesting (three copies of a 110 KB JPEG cost a read-only worker 36 µs a record, 0.4 of the
    # time a local SSD took to deliver it). Example.features (1) -> Features.feature (1): map entries
    for number, _, value in _fields(memoryview(buf)):
        if number != 1:
            continue
        for entry_number, _, entry in _fields(value):
            if entry_number != 1:
                continue
            key = val = None
            for n, _, v in _fields(entry):
                if n == 1:
                    key = bytes(v).decode()
                elif n == 2:
                    val = v
            if key is not None and val is not None:
                features[key] = _feature(val)
    if "image/encoded" not in features:
        raise BadRecord("not an Example of this tool's: no feature 'image/encoded'")
    try:
        return (
            int(features["image/index"]),
            int(features["image/class/label"]),
            bytes(features["image/encoded"]) if payload else None,
        )
    except (KeyError, TypeError) as e:
        raise BadRecord(f"not an Example of this tool's: no feature {e}") from None
