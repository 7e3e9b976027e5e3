"""What travels on a direct link (:mod:`.links`): the hello that opens a stream, the frames after it,
and the reading of an incoming stream as far as the bytes that arrived allow.

Policy.
* The hello has one size, :data:`HELLO_BYTES`: a head (the ``HELLO`` marker
  and the body's fixed length), the run's secret and a digest of the sending
  device's name (so any name fits; the receiver's address book names it).
  Until a stream has proven the secret it is read into one buffer of that
  size and nothing else; a head that is not the hello's closes it as soon as
  its 12 bytes are in, a wrong secret once the hello is. Nothing a stranger
  declares is ever allocated: before the secret, nothing it says is a size.
* A frame is a pickle (protocol 5) of ``[(run, tag, value), ...]`` with the
  NumPy buffers out of band: a head (buffer count, pickle length), the
  buffers' lengths, the pickle, the buffers. Written with one ``sendmsg``
  from the arrays' own memory, read with ``recv_into`` into the arrays' new
  memory: no copy beyond the kernel's.
* Small frames are compact instead (:mod:`.compact`): a loop's step sends a
  few values of a few bytes each, and pickling them, their tags and their
  dtypes cost more than the step's arithmetic. A frame of at most
  :data:`~.compact.COMPACT_BYTES` whose values are plain NumPy arrays and
  scalars goes as their raw bytes behind a short header (dtype, shape),
  anything else in it as a pickle of its own; its head says so
  (``COMPACT`` in place of the buffer count). Values arrive bitwise equal
  either way.
* A proven peer's frames are bounded too (:data:`MAX_BUFFERS`,
  :data:`MAX_FRAME_BYTES`, checked before anything is allocated; the sender
  refuses to write past them). A frame beyond them, one whose buffers cannot
  be allocated, or one that does not unpickle into values fails the stream
  with the reason in ``Stream.error``, and :mod:`.links` fails that link,
  naming the peer.

State: per incoming stream, the buffers of the part being read, how far it
is filled, and who sent it once proven.
"""

from __future__ import annotations

import hashlib
import hmac
import pickle
import socket
import struct
from typing import Any, Mapping, Sequence

from ..errors import RunError
from .compact import COMPACT_BYTES, pack, unpack
from .exchange import Mailbox, Tag

_HEAD = struct.Struct("!IQ")  # buffers in the frame (HELLO for the first frame), length of the pickle
_LENGTH = struct.Struct("!Q")
HELLO = 0xFFFFFFFF
COMPACT = 0xFFFFFFFE  # in place of the buffer count: the frame is compact (.compact), the length is its body's
SECRET_BYTES = 32
_NAME_BYTES = 32  # a digest of the sender's device name: any name, one size
HELLO_BYTES = _HEAD.size + SECRET_BYTES + _NAME_BYTES  # all that is read of a stream before its secret is proven
MAX_BUFFERS = 1 << 20  # out-of-band buffers in one frame (a proven peer's)
MAX_FRAME_BYTES = 1 << 40  # the pickle and its buffers together, in one frame (a proven peer's)


def encode(items: Sequence[tuple[str, Tag, Any]]) -> list[Any]:
    """One frame's parts: head, buffer lengths, the pickle, the buffers (written as they are); or, for a
    small frame, head and compact body."""
    small = pack(items)
    if small is not None:
        return [_HEAD.pack(COMPACT, len(small)), small]
    buffers: list[pickle.PickleBuffer] = []
    body = pickle.dumps(list(items), protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    sizes = [r.nbytes for r in raws]
    if len(raws) > MAX_BUFFERS or len(body) + sum(sizes) > MAX_FRAME_BYTES:  # the receiver would refuse it
        raise RunError(f"values of {len(body) + sum(sizes):,} bytes in {len(raws):,} buffers are more than "
                       f"one link frame holds ({MAX_FRAME_BYTES:,} bytes, {MAX_BUFFERS:,} buffers)")
    return [_HEAD.pack(len(raws), len(body)) + b"".join(_LENGTH.pack(n) for n in sizes), body, *raws]


_HELLO_HEAD = _HEAD.pack(HELLO, SECRET_BYTES + _NAME_BYTES)


def hello(secret: bytes, device: str) -> bytes:
    """The first frame of every stream: the marker, its fixed size, the run's secret, who is calling."""
    return _HELLO_HEAD + secret + name_digest(device)


def name_digest(device: str) -> bytes:
    """A device name as the hello carries it: one size for any name."""
    return hashlib.blake2b(device.encode(), digest_size=_NAME_BYTES).digest()


class Stream:
    """An incoming stream, read as far as the bytes that arrived allow (frames may arrive in pieces).

    Until its hello is proven it is read into one buffer of :data:`HELLO_BYTES` (``deadline``: by when
    it must be); after that, frame by frame into buffers of the sizes its frames declare.
    """

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.deadline = sock, deadline
        self.sender: str | None = None  # known once its hello is read and the secret checked
        self.error = ""  # why the stream failed, when it did not just end
        self.parts: list[bytearray] = [bytearray(HELLO_BYTES)]
        self.at, self.filled, self.stage, self.size = 0, 0, "hello", 0

    def _expect(self, stage: str, parts: list[bytearray]) -> None:
        self.parts, self.at, self.filled, self.stage = parts, 0, 0, stage

    def read(self, secret: bytes, names: Mapping[bytes, str], mailbox: Mailbox) -> bool:
        """Read what arrived; False once the stream is closed or refused (``error`` says why, for a peer's).

        ``secret`` is what its hello must carry, ``names`` the devices by :func:`name_digest`; complete
        frames go to ``mailbox``.
        """
        while True:
            target = memoryview(self.parts[self.at])[self.filled:]
            if len(target):
                try:
                    n = self.sock.recv_into(target)
                except (BlockingIOError, InterruptedError):
                    return True
                except OSError as exc:  # reset, or timed out: keep-alive or unacknowledged data (a dark link)
                    self.error = exc.strerror or type(exc).__name__
                    return False
                if n == 0:
                    return False
                self.filled += n
                if self.sender is None and self.filled >= _HEAD.size and not self._hello_head():
                    return False  # refused as soon as its head shows it is no hello of ours
                if n < len(target):
                    continue
            self.at, self.filled = self.at + 1, 0
            if self.at == len(self.parts) and not self._advance(secret, names, mailbox):
                return False

    def _hello_head(self) -> bool:
        return self.parts[0][:_HEAD.size] == _HELLO_HEAD

    def _advance(self, secret: bytes, names: Mapping[bytes, str], mailbox: Mailbox) -> bool:
        """A part is complete: lay out the next ones, or hand over the frame."""
        if self.stage == "head":
            count, self.size = _HEAD.unpack(self.parts[0])
            if count == COMPACT:
                if self.size > COMPACT_BYTES:
                    return self._bad(f"it declared a compact frame of {self.size:,} bytes, more than one holds "
                                     f"({COMPACT_BYTES:,})")
                self._expect("compact", [bytearray(self.size)])
                return True
            if count > MAX_BUFFERS or self.size > MAX_FRAME_BYTES:
                return self._bad(f"it declared a frame of {self.size:,} bytes in {count:,} buffers, more than "
                                 f"a frame holds ({MAX_FRAME_BYTES:,} bytes, {MAX_BUFFERS:,} buffers)")
            if count == 0:
                return self._hold([self.size])
            self._expect("lengths", [bytearray(_LENGTH.size * count)])
        elif self.stage == "lengths":
            sizes = [self.size, *(n for (n,) in _LENGTH.iter_unpack(self.parts[0]))]
            if sum(sizes) > MAX_FRAME_BYTES:
                return self._bad(f"it declared a frame of {sum(sizes):,} bytes, more than a frame holds "
                                 f"({MAX_FRAME_BYTES:,})")
            return self._hold(sizes)
        elif self.stage == "hello":
            given, name = self.parts[0][_HEAD.size:_HEAD.size + SECRET_BYTES], bytes(self.parts[0][-_NAME_BYTES:])
            if not secret or not hmac.compare_digest(bytes(given), secret):
                return False
            self.sender = names.get(name) or f"an unlisted device ({name.hex()[:12]})"
            self._expect("head", [bytearray(_HEAD.size)])
        else:
            try:
                body, *buffers = self.parts
                mailbox.put(unpack(body) if self.stage == "compact" else pickle.loads(body, buffers=buffers))
            except Exception as exc:  # noqa: BLE001 - a frame of a proven peer that is not what we send
                return self._bad(f"its frame could not be read: {type(exc).__name__}: {exc}")
            self._expect("head", [bytearray(_HEAD.size)])
        return True

    def _hold(self, sizes: list[int]) -> bool:
        """Buffers for a frame's pickle and arrays, or the link fails (a proven peer asked for too much)."""
        try:
            self._expect("frame", [bytearray(n) for n in sizes])
        except MemoryError:
            return self._bad(f"its frame of {sum(sizes):,} bytes could not be held (out of memory)")
        return True

    def _bad(self, why: str) -> bool:
        self.error = why
        return False
