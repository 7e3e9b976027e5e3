"""TensorBoard event files, written with no TensorFlow, TensorBoard or protobuf library.

Policy. An event file is a sequence of TFRecords (a little-endian uint64
length, the masked CRC-32C of those 8 bytes, the data, the masked CRC-32C
of the data), each holding one ``Event`` protobuf. The first event says the
file's version (``brain.Event:2``); each later one holds a step's scalars
as ``Summary.Value``s with a ``simple_value``, which TensorBoard shows
under the Scalars tab. The few protobuf fields are encoded here by hand:
``Event.wall_time`` (1, double), ``step`` (2, int64), ``file_version``
(3, string), ``summary`` (5); ``Summary.value`` (1); ``Value.tag`` (1,
string), ``simple_value`` (2, float).

Layout: ``FOLDER/<spec>/<start>-<token>/<loop>/events.out.tfevents.<time>.
<host>.<pid>.<token>``, a folder per run of orchestrate and in it one per
tracked run (TensorBoard's "runs", compared side by side: a sweep's copies
among them). Each file is made new (never opened over an existing one) and
only appended to, a few records at a time as the metric CSVs get their
rows; it is flushed after each so that a TensorBoard watching the folder
sees a long loop as it goes.

State: the open file of each tracked run, closed at the run's end.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Sequence
from typing import BinaryIO

from ..paths import safe_name
from .records import Point, SinkTarget, Tracked

_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _table() -> tuple[int, ...]:
    rows = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        rows.append(crc)
    return tuple(rows)


_TABLE = _table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """TFRecord's mask: a CRC of data holding CRCs is rotated and offset."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    """One TFRecord."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # a negative int64 is ten bytes, as protobuf writes it
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _field(number, 2) + _varint(len(data)) + data


def scalar_event(wall_time: float, step: int, values: Sequence[tuple[str, float]]) -> bytes:
    """An ``Event`` with a ``Summary`` of ``simple_value``s at ``step``."""
    summary = b"".join(_bytes_field(1, _bytes_field(1, tag.encode()) + _field(2, 5) + struct.pack("<f", value))
                       for tag, value in values)
    return (_field(1, 1) + struct.pack("<d", wall_time) + _field(2, 0) + _varint(step)
            + _bytes_field(5, summary))


def version_event(wall_time: float) -> bytes:
    return _field(1, 1) + struct.pack("<d", wall_time) + _bytes_field(3, b"brain.Event:2")


class EventLog:
    """The ``tensorboard`` sink: a folder per run of orchestrate, an event file per tracked run."""

    def __init__(self, target: SinkTarget):
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(target.started))
        self.folder = os.path.join(target.folder, safe_name(target.spec), f"{stamp}-{target.token}")
        self.target = target
        self.files: dict[str, BinaryIO] = {}

    def _file(self, run: Tracked) -> BinaryIO:
        handle = self.files.get(run.key)
        if handle is None:
            folder = os.path.join(self.folder, run.key)
            os.makedirs(folder, exist_ok=True)
            now = time.time()
            name = f"events.out.tfevents.{int(now)}.{safe_name(socket.gethostname())}.{os.getpid()}.{self.target.token}"
            handle = open(os.path.join(folder, name), "xb")  # new: never over another file
            handle.write(record(version_event(now)))
            self.files[run.key] = handle
        return handle

    def where(self) -> str:
        return f"TensorBoard event files under {os.path.relpath(self.folder)} (tensorboard --logdir " \
               f"{os.path.relpath(self.target.folder)})"

    def log(self, run: Tracked, metric: str, points: Sequence[Point]) -> None:
        handle = self._file(run)
        now = time.time()
        handle.write(b"".join(record(scalar_event(now, step, [(metric, value)])) for step, value in points))
        handle.flush()

    def end(self, run: Tracked, finished: bool) -> None:
        handle = self.files.pop(run.key, None)
        if handle is not None:
            handle.close()

    def close(self, finished: bool) -> None:
        for handle in self.files.values():
            handle.close()
        self.files = {}
