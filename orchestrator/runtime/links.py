"""Direct links between device workers: a loop window's values, socket to socket, read by the thread that needs them.

Why not Dask's comms. They were the first transport (and stay the one for
TLS clusters, :mod:`.exchange`'s courier): a value written by a window's
thread went to the worker's event loop (a thread hop), out through Tornado,
in through the receiver's event loop, into the mailbox and on to the waiting
thread (another hop). On the 2-core machine the two hops and the event loops
between them cost more than the whole step's compute: the step picture of
the polyfit example showed most of each 1.6 ms step waiting for values that
were already sent. TensorFlow's workers read a tensor straight off the
channel in the op that waits for it; this module does the same.

Policy.
* One TCP stream per (sender, receiver) pair, opened by the sender on its
  first value and kept for the worker's life; ``TCP_NODELAY``; one frame per
  batch of values (no reply, no acknowledgement: TCP's order and delivery
  are the protocol). The first frame says who is calling and carries the
  cluster's link secret, checked before anything on the stream is read as
  data (a stranger's stream is closed unread).
* A frame is a pickle (protocol 5) of ``[(run, tag, value), ...]`` with the
  NumPy buffers out of band: written with one ``sendmsg`` from the arrays'
  own memory, read with ``recv_into`` into the arrays' new memory. No copy
  beyond the kernel's, no serializer of our own.
* No reader threads. The thread that waits for a value polls the streams
  (``select``) and reads every complete frame into the :class:`Mailbox`;
  the value it wanted is then there. Writes never wait while values to read
  are pending: a write that would block reads what the peers sent
  meanwhile, so two devices sending each other large values cannot wait for
  each other forever.
* Failures. A stream closed by the peer (its worker stopped or died) fails
  every wait for that peer's values at once, naming it; a link that went
  dark (a cable, a host) is found by TCP keep-alive and ``TCP_USER_TIMEOUT``
  within about 5 s; an aborted run wakes the poller through a socket pair.

State, per worker: the listeners (TCP, and an abstract Unix socket that
peers on the same host and network namespace use instead: no TCP stack
between two processes of one machine), the address book of the other
devices' listeners (set by the client before each run), the open streams,
and which peers closed theirs. All of it is touched by one polling thread at a time.
"""

from __future__ import annotations

import hmac
import os
import pickle
import secrets
import select
import socket
import struct
import sys
import threading
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import RunError
from .exchange import Mailbox, Tag

_HEAD = struct.Struct("!IQ")  # buffers in the frame (HELLO for the first frame), length of the pickle
_LENGTH = struct.Struct("!Q")
HELLO = 0xFFFFFFFF
SECRET_BYTES = 32
DARK_LINK_SECONDS = 5  # keep-alive and unacknowledged data: a peer unheard of this long is gone


def encode(items: Sequence[tuple[str, Tag, Any]]) -> list[Any]:
    """One frame's parts: head, buffer lengths, the pickle, the buffers (written as they are)."""
    buffers: list[pickle.PickleBuffer] = []
    body = pickle.dumps(list(items), protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    lengths = b"".join(_LENGTH.pack(r.nbytes) for r in raws)
    return [_HEAD.pack(len(raws), len(body)) + lengths, body, *raws]


class _Stream:
    """An incoming stream, read as far as the bytes that arrived allow (frames may arrive in pieces)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.sender: str | None = None  # known once its first frame (the hello) is read and checked
        self.error = ""  # why the stream failed, when it did not just end
        self._reset()

    def _reset(self) -> None:
        self.parts: list[bytearray] = [bytearray(_HEAD.size)]
        self.at, self.filled, self.stage = 0, 0, "head"

    def read(self, secret: bytes, mailbox: Mailbox) -> bool:
        """Read what arrived; False once the stream is closed (or refused)."""
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
                if n < len(target):
                    continue
            self.at, self.filled = self.at + 1, 0
            if self.at == len(self.parts) and not self._advance(secret, mailbox):
                return False

    def _advance(self, secret: bytes, mailbox: Mailbox) -> bool:
        """A part is complete: lay out the next ones, or hand over the frame."""
        if self.stage == "head":
            count, size = _HEAD.unpack(self.parts[0])
            if count == HELLO:
                self.parts, self.at, self.stage = [bytearray(size)], 0, "hello"
            elif self.sender is None or size > 1 << 40:
                return False  # data before a hello, or nonsense: not one of ours
            else:
                self.parts, self.at, self.stage = [bytearray(_LENGTH.size * count)], 0, "lengths"
                if count == 0:
                    self.parts, self.stage = [bytearray(size)], "frame"
                self.size = size
        elif self.stage == "lengths":
            sizes = [_LENGTH.unpack_from(self.parts[0], i * _LENGTH.size)[0]
                     for i in range(len(self.parts[0]) // _LENGTH.size)]
            self.parts, self.at, self.stage = [bytearray(self.size), *(bytearray(s) for s in sizes)], 0, "frame"
        elif self.stage == "hello":
            given, name = bytes(self.parts[0][:SECRET_BYTES]), bytes(self.parts[0][SECRET_BYTES:])
            if not secret or not hmac.compare_digest(given, secret):
                return False
            self.sender = name.decode()
            self._reset()
        else:
            body, *buffers = self.parts
            mailbox.put(pickle.loads(body, buffers=buffers))
            self._reset()
        return True


@dataclass(frozen=True)
class Address:
    """Where a device's worker listens: TCP always; a Unix socket for peers on the same host."""

    host: str
    port: int
    local: str = ""  # an abstract Unix socket name (Linux), reachable only from the same network namespace
    machine: str = ""  # the boot and network namespace of the listener: equal means the local name works


def _machine() -> str:
    """This host and network namespace (two workers with the same value can use Unix sockets)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            boot = handle.read().strip()
        return f"{boot}:{os.stat('/proc/self/ns/net').st_ino}"
    except OSError:
        return ""


def _tune(sock: socket.socket) -> None:
    if sock.family == socket.AF_UNIX:
        return
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in (("TCP_KEEPIDLE", 2), ("TCP_KEEPINTVL", 1), ("TCP_KEEPCNT", 3),
                          ("TCP_USER_TIMEOUT", DARK_LINK_SECONDS * 1000)):
        if hasattr(socket, option):  # Linux; elsewhere the system's defaults hold
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


class Links:
    """This worker's links: its listeners, the other devices' addresses, the streams open each way."""

    def __init__(self, device: str, mailbox: Mailbox):
        self.device, self.mailbox = device, mailbox
        self.secret = b""
        self.listeners: list[socket.socket] = []
        self.address: Address | None = None
        self.book: dict[str, Address] = {}
        self.outgoing: dict[str, socket.socket] = {}
        self.incoming: dict[socket.socket, _Stream] = {}
        self.closed: dict[str, str] = {}  # peer -> why its stream ended (until it opens a new one)
        self.polling = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        mailbox.wakers.append(self.wake)

    def listen(self, host: str, secret: bytes) -> Address:
        """Listen on ``host`` (once per worker); streams must prove ``secret`` from now on. The address."""
        self.secret = secret
        if self.address is None:
            tcp = socket.create_server((host, 0), backlog=64)
            self.listeners.append(tcp)
            local, machine = "", _machine()
            if machine and sys.platform.startswith("linux"):
                unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                local = f"\0orchestrator-links-{os.getpid()}-{secrets.token_hex(8)}"
                unix.bind(local)
                unix.listen(64)
                self.listeners.append(unix)
            for listener in self.listeners:
                listener.setblocking(False)
            name = tcp.getsockname()
            self.address = Address(str(name[0]), int(name[1]), local, machine)
        return self.address

    def reaches(self, device: str) -> bool:
        return device in self.book

    def send(self, device: str, run: str, items: Sequence[tuple[Tag, Any]]) -> None:
        """Write ``items`` to ``device``'s stream now (reading what arrives meanwhile if the write would block)."""
        sock = self.outgoing.get(device) or self._connect(device)
        parts = [memoryview(p).cast("B") for p in encode([(run, tag, value) for tag, value in items])]
        try:
            self._write(sock, parts)
        except OSError as exc:
            self.outgoing.pop(device, None)
            sock.close()
            raise RunError(f"lost the link to {device}: {exc.strerror or type(exc).__name__}") from None

    def _connect(self, device: str) -> socket.socket:
        peer = self.book[device]
        sock = self._connect_local(peer) if self.address is not None and peer.machine == self.address.machine \
            else None
        if sock is None:
            try:
                sock = socket.create_connection((peer.host, peer.port), timeout=DARK_LINK_SECONDS)
            except OSError as exc:
                raise RunError(f"cannot open a link to {device} at {peer.host}:{peer.port}: "
                               f"{exc.strerror or exc}") from None
        _tune(sock)
        name = self.device.encode()
        sock.sendall(_HEAD.pack(HELLO, SECRET_BYTES + len(name)) + self.secret + name)
        sock.setblocking(False)
        self.outgoing[device] = sock
        return sock

    @staticmethod
    def _connect_local(peer: Address) -> socket.socket | None:
        """A Unix socket to a peer on this host (no TCP stack between two processes), or None."""
        if not peer.local:
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(peer.local)
        except OSError:
            sock.close()
            return None
        return sock

    def _write(self, sock: socket.socket, parts: list[memoryview]) -> None:
        while parts:
            try:
                sent = sock.sendmsg(parts)
            except (BlockingIOError, InterruptedError):
                sent = 0
            while parts and sent >= len(parts[0]):
                sent -= len(parts[0])
                parts.pop(0)
            if parts:
                parts[0] = parts[0][sent:]
                self.poll(DARK_LINK_SECONDS, writing=sock)

    def poll(self, timeout: float, writing: socket.socket | None = None) -> None:
        """Wait up to ``timeout`` for anything to read (or ``writing`` to take more); read every frame that came."""
        if not self.polling.acquire(blocking=writing is not None):
            self.mailbox.idle(timeout)  # another thread polls for this worker: its frames land in the mailbox
            return
        try:
            readers: list[Any] = [self._wake_r, *self.listeners, *self.incoming]
            ready, _, _ = select.select(readers, [writing] if writing is not None else [], [], timeout)
            for sock in ready:
                if sock is self._wake_r:
                    self._drain_wake()
                elif sock in self.listeners:
                    self._accept(sock)
                else:
                    self._read(sock)
        finally:
            self.polling.release()

    def _accept(self, listener: socket.socket) -> None:
        try:
            sock, _ = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        _tune(sock)
        sock.setblocking(False)
        self.incoming[sock] = _Stream(sock)

    def _read(self, sock: socket.socket) -> None:
        stream = self.incoming[sock]
        known = stream.sender
        if stream.read(self.secret, self.mailbox):
            if known is None and stream.sender is not None:
                self.closed.pop(stream.sender, None)  # a peer back (a restarted worker): its stream is new
            return
        del self.incoming[sock]
        sock.close()
        if stream.sender is not None:
            self.closed[stream.sender] = f"the link from it failed ({stream.error})" if stream.error else \
                "its worker closed the link (it stopped or was lost)"
            self.mailbox.wake_takers()

    def gone(self, device: str) -> str | None:
        """Why ``device`` can send nothing more, or None while its stream is open (or not yet opened)."""
        return self.closed.get(device)

    def wake(self) -> None:
        try:
            self._wake_w.send(b"!")
        except OSError:
            pass

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError, OSError):
            pass

    def close(self) -> None:
        for sock in [*self.outgoing.values(), *self.incoming, *self.listeners]:
            sock.close()
        self.outgoing.clear()
        self.incoming.clear()
        self.listeners.clear()
        self.address = None
