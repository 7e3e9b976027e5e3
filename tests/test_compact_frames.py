"""Compact link frames (runtime.compact): a step's small values as raw bytes, not pickles.

Every value must come back bitwise equal and of the same type, whichever
path it takes; a compact frame that is not well formed fails the link,
naming the peer, as a bad pickle frame does. Real sockets on loopback.
"""

from __future__ import annotations

import re
import socket
import struct
import time
from typing import Any

import numpy as np
import pytest

from orchestrator.errors import RunError
from orchestrator.runtime import compact
from orchestrator.runtime.frames import COMPACT, encode, hello
from test_links import SECRET, closed_by_peer, head, pair, the_value_still_passes, where

VALUES: list[Any] = [
    np.arange(3.0),  # polyfit's gradient
    np.float64(2.5),  # a NumPy scalar (a loss)
    np.asarray(3.5),  # a 0-d array stays an array
    np.zeros((2, 0)),  # empty
    np.arange(12).reshape(3, 4)[:, ::2],  # not contiguous: arrives C-ordered, as a pickle gives it
    np.arange(6.0).reshape(2, 3).T,  # Fortran-ordered: pickled, and stays Fortran-ordered
    np.array([True, False]), np.bool_(True),
    np.array([1 + 2j, 3 - 4j], dtype=np.complex64), np.complex128(1 + 2j),
    np.array([1, 2], dtype=">i4"), np.int8(-3), np.uint64(2**64 - 1), np.array([1.5], dtype=np.float16),
    np.array(["2020-01-01", "NaT"], dtype="M8[D]"), np.datetime64("2020-01-01T10:00"), np.timedelta64(5, "s"),
    np.array(["ab", "c"]), np.array([b"xy"]), np.str_("text"),
    np.zeros(2, dtype=[("a", "<f4"), ("b", "<i2")]),  # a record: pickled
    np.array([None, 1], dtype=object),  # objects: pickled
    np.ma.masked_array([1.0, 2.0], mask=[True, False]),  # a subclass: pickled
    3.5, 7, "a string", (1, "two"), None,
]


def same(sent: Any, got: Any) -> None:
    assert type(got) is type(sent), (sent, got)
    if isinstance(sent, (np.ndarray, np.generic)):
        a, b = np.asarray(sent), np.asarray(got)
        assert (a.dtype, a.shape) == (b.dtype, b.shape)
        assert a.dtype.hasobject or a.tobytes() == b.tobytes(), (sent, got)
        if isinstance(sent, np.ndarray):
            assert got.flags.f_contiguous == (sent.flags.f_contiguous and not sent.flags.c_contiguous) or \
                got.flags.c_contiguous
            assert got.flags.writeable and got.flags.aligned
        if isinstance(sent, np.ma.MaskedArray):
            np.testing.assert_array_equal(got.mask, sent.mask)
    else:
        assert got == sent


def test_small_frames_are_compact_and_every_kind_of_value_comes_back_bitwise_equal() -> None:
    items = [("run", (0, i, f"v{i}"), v) for i, v in enumerate(VALUES)]
    head_part = encode(items)[0]
    assert struct.unpack("!IQ", head_part[:12])[0] == COMPACT
    for (_, tag, sent), (run, got_tag, got) in zip(items, compact.unpack(bytearray(compact.pack(items) or b""))):
        assert (run, got_tag) == ("run", tag)
        same(sent, got)


def test_every_kind_of_value_passes_a_link_and_big_frames_still_go_as_pickles() -> None:
    a, b = pair()
    a.send("B", "run", [((0, 0, f"v{i}"), v) for i, v in enumerate(VALUES)])
    for i, sent in enumerate(VALUES):
        same(sent, b.mailbox.take("run", (0, 0, f"v{i}"), "A", b))
    big = np.random.default_rng(0).random(compact.COMPACT_BYTES // 8 + 1)
    assert struct.unpack("!IQ", encode([("run", (0, 1, "big"), big)])[0][:12])[0] != COMPACT
    a.send("B", "run", [((0, 1, "big"), big), ((0, 1, "small"), np.float64(1.0))])
    same(big, b.mailbox.take("run", (0, 1, "big"), "A", b))
    same(np.float64(1.0), b.mailbox.take("run", (0, 1, "small"), "A", b))
    a.close(), b.close()


def compact_frame(body: bytes) -> bytes:
    return head(COMPACT, len(body)) + body


GOOD = compact.pack([("run", (0, 1, "x"), np.arange(3.0))]) or b""


@pytest.mark.parametrize("frame, why", [
    (head(COMPACT, compact.COMPACT_BYTES + 1), "it declared a compact frame of 65,537 bytes"),
    (compact_frame(GOOD[:-3]), "its frame could not be read: ValueError: an array runs past the frame's end"),
    (compact_frame(GOOD + b"junk"), "its frame could not be read: ValueError: 4 bytes left over"),
    (compact_frame(GOOD.replace(b"<f8", b"|O8")), "its frame could not be read: ValueError: a value of dtype object"),
    (compact_frame(struct.pack("!HI", 3, 10**9) + b"run"), "its frame could not be read: ValueError: 1,000,000,000 "
                                                           "items cannot fit"),
], ids=["too big", "cut short", "left over", "objects", "too many items"])
def test_a_bad_compact_frame_from_a_proven_peer_fails_that_link_naming_it(frame: bytes, why: str) -> None:
    a, b = pair()
    the_value_still_passes(a, b, 0)
    peer = socket.create_connection((where(b).host, where(b).port))
    peer.sendall(hello(SECRET, "A") + frame)
    with pytest.raises(RunError, match=re.escape(f"'x' of step 1 cannot come from A: the link from it failed ({why}")):
        b.mailbox.take("run", (0, 1, "x"), "A", b)
    assert closed_by_peer(peer)
    a.close(), b.close()


def test_a_peer_that_dies_in_the_middle_of_a_batch_fails_the_wait_naming_it() -> None:
    """The values of a frame arrive together or not at all: half a frame, then the peer's end, is its loss."""
    a, b = pair()
    the_value_still_passes(a, b, 0)
    batch = compact.pack([("run", (0, 1, "x"), np.arange(3.0)), ("run", (0, 1, "y"), np.float64(2.0))]) or b""
    peer = socket.create_connection((where(b).host, where(b).port))
    peer.sendall(hello(SECRET, "A") + compact_frame(batch)[:len(batch) // 2])
    started = time.monotonic()
    peer.close()
    with pytest.raises(RunError, match="'x' of step 1 cannot come from A: its worker closed the link"):
        b.mailbox.take("run", (0, 1, "x"), "A", b)
    assert time.monotonic() - started < 10.0
    a.close(), b.close()


class _CountedPickles(np.ndarray):
    """An array subclass that counts how often it is pickled."""

    pickled = 0

    def __reduce_ex__(self, protocol: Any) -> Any:
        type(self).pickled += 1
        return super().__reduce_ex__(protocol)


def test_a_big_value_that_is_not_sent_raw_is_not_pickled_for_a_compact_frame_first() -> None:
    big = np.zeros(compact.COMPACT_BYTES // 8 + 1).view(_CountedPickles)  # too big for a compact frame
    assert compact.pack([("run", (0, 1, "x"), big)]) is None
    assert _CountedPickles.pickled == 0  # the frame's own pickle is the only one it gets
    small = np.zeros(4).view(_CountedPickles)
    assert compact.pack([("run", (0, 1, "x"), small)]) is not None and _CountedPickles.pickled == 1
