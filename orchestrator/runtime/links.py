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
  are the protocol). What the bytes are, and how little of a stream is read
  before it proves the run's secret, is :mod:`.frames`'.
* Strangers. Anything on the host can connect to a worker's sockets, and
  nothing a stranger does may end a run or touch its values. An accepted
  stream is pending until its hello is proven: at most :data:`MAX_PENDING`
  of them (beyond that the oldest is closed: a peer of ours sends its hello
  as it connects, so only a stranger stays pending), each for at most
  :data:`HELLO_SECONDS`; a refused hello closes it at once. Proven streams
  are bounded by the number of devices.
* No reader threads. The thread that waits for a value polls the streams
  (``selectors``: epoll on Linux, so any descriptor number works, and every
  stream stays registered between polls) and reads every complete frame
  into the :class:`Mailbox`; the value it wanted is then there. Writes
  never wait while values to read are pending: a write that would block
  reads what the peers sent meanwhile, so two devices sending each other
  large values cannot wait for each other forever.
* Failures. A stream closed by the peer (its worker stopped or died), or
  one whose frame is bad, fails every wait for that peer's values at once,
  naming it; a link that went dark (a cable, a host) is found by TCP
  keep-alive and ``TCP_USER_TIMEOUT`` within about 5 s; an aborted run
  wakes the poller through a socket pair.

State, per worker: the listeners (TCP, and an abstract Unix socket that
peers on the same host and network namespace use instead: no TCP stack
between two processes of one machine), the address book of the other
devices' listeners (set by the client before each run), the streams (open
to peers, proven from them, pending their hello) and the selector they are
registered with, and which peers closed theirs. All of it is touched by one
polling thread at a time.
"""

from __future__ import annotations

import errno
import os
import secrets
import selectors
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import RunError
from .exchange import Mailbox, Tag
from .frames import SECRET_BYTES, Stream, encode, hello, name_digest

MAX_PENDING = 128  # streams accepted but not yet proven; beyond it the oldest is closed
HELLO_SECONDS = 5.0  # how long an accepted stream may take to prove the secret
_ACCEPTS = 64  # connections taken off a listener per wake-up; the rest wait for the next poll
DARK_LINK_SECONDS = 5  # keep-alive and unacknowledged data: a peer unheard of this long is gone
_NO_ROOM = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)  # accept() failing for want of resources
_WAKE, _LISTENER, _WRITING = "wake", "listener", "writing"  # what a selector key stands for (or a Stream)


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
        self.book = {}
        self.outgoing: dict[str, socket.socket] = {}
        self.incoming: dict[socket.socket, Stream] = {}  # streams whose hello was proven
        self.pending: dict[socket.socket, Stream] = {}  # accepted, hello not yet proven: oldest first
        self.closed: dict[str, str] = {}  # peer -> why its stream ended (until it opens a new one)
        self.polling = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector = self._new_selector()
        mailbox.wakers.append(self.wake)

    @property
    def book(self) -> dict[str, Address]:
        """Where every other device listens (set before each run)."""
        return self._book

    @book.setter
    def book(self, book: dict[str, Address]) -> None:
        # a device listening elsewhere than at the last run (its worker restarted, or drained and replaced):
        # the stream to its old self, and the word that that one closed, are not about the new one
        for device in [d for d, peer in getattr(self, "_book", {}).items() if book.get(d) != peer]:
            self.closed.pop(device, None)
            old = self.outgoing.pop(device, None)
            if old is not None:
                old.close()
        self._book = book
        self._names = {name_digest(device): device for device in book}

    def _new_selector(self) -> selectors.BaseSelector:
        selector = selectors.DefaultSelector()
        selector.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        return selector

    def listen(self, host: str, secret: bytes) -> Address:
        """Listen on ``host`` (once per worker); streams must prove ``secret`` from now on. The address."""
        if len(secret) != SECRET_BYTES:
            raise ValueError(f"a link secret has {SECRET_BYTES} bytes, not {len(secret)}")
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
                self._selector.register(listener, selectors.EVENT_READ, _LISTENER)
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
        sock.sendall(hello(self.secret, self.device))
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
            if writing is None:
                ready = self._selector.select(timeout)
            else:
                self._selector.register(writing, selectors.EVENT_WRITE, _WRITING)
                try:
                    ready = self._selector.select(timeout)
                finally:
                    self._selector.unregister(writing)
            for key, _ in ready:
                what = key.data
                if isinstance(what, Stream):
                    if what.sock.fileno() >= 0:  # not closed by an event before it (an evicted stranger)
                        self._read(what)
                elif what is _LISTENER:
                    self._accept(key.fileobj)  # type: ignore[arg-type]  # a listener registered as such
                elif what is _WAKE:
                    self._drain_wake()
            if self.pending:
                self._expire(time.monotonic())
        finally:
            self.polling.release()

    def _accept(self, listener: socket.socket) -> None:
        """Take the connections waiting (a few at a time); each is pending until its hello is proven."""
        for _ in range(_ACCEPTS):
            try:
                sock, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # one reset before it was taken (next), or no room for it
                if exc.errno not in _NO_ROOM:
                    continue
                if self.pending:  # out of descriptors: close a stranger's (the oldest pending) and take it later
                    self._drop(next(iter(self.pending.values())))
                return
            sock.setblocking(False)
            if len(self.pending) >= MAX_PENDING:  # the oldest: ours send their hello as they connect
                self._drop(next(iter(self.pending.values())))
            stream = Stream(sock, time.monotonic() + HELLO_SECONDS)
            self.pending[sock] = stream
            self._selector.register(sock, selectors.EVENT_READ, stream)
            self._read(stream)  # a peer's hello is most often there already

    def _expire(self, now: float) -> None:
        """Close the streams that did not prove the secret in time (the oldest come first)."""
        for stream in list(self.pending.values()):
            if stream.deadline > now:
                return
            self._drop(stream)

    def _drop(self, stream: Stream) -> None:
        self.pending.pop(stream.sock, None)
        self.incoming.pop(stream.sock, None)
        self._selector.unregister(stream.sock)
        stream.sock.close()

    def _read(self, stream: Stream) -> None:
        known = stream.sender
        if stream.read(self.secret, self._names, self.mailbox):
            if known is None and stream.sender is not None:  # proven: a peer of this run (or one back)
                del self.pending[stream.sock]
                self.incoming[stream.sock] = stream
                _tune(stream.sock)
                self.closed.pop(stream.sender, None)  # a peer back (a restarted worker): its stream is new
            return
        self._drop(stream)
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
        for sock in [*self.outgoing.values(), *self.incoming, *self.pending, *self.listeners]:
            sock.close()
        self.outgoing.clear()
        self.incoming.clear()
        self.pending.clear()
        self.listeners.clear()
        self._selector.close()
        self._selector = self._new_selector()
        self.address = None
