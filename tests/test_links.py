"""Direct links between device workers (runtime.links): real sockets on loopback, two `Links` per test.

Each side is what one worker holds: a listener, a mailbox, streams opened by
the sender. The waiting side reads its streams itself, so these tests take
values in the test's thread exactly as a window's thread does.
"""

from __future__ import annotations

import re
import resource
import socket
import struct
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from orchestrator.errors import RunError
from orchestrator.runtime import Mailbox
from orchestrator.runtime import links as links_module
from orchestrator.runtime.frames import HELLO, HELLO_BYTES, hello
from orchestrator.runtime.links import Address, Links

SECRET = b"s" * 32


def pair() -> tuple[Links, Links]:
    """Two devices that know where the other listens."""
    a, b = Links("A", Mailbox()), Links("B", Mailbox())
    address_a, address_b = a.listen("127.0.0.1", SECRET), b.listen("127.0.0.1", SECRET)
    a.book, b.book = {"B": address_b}, {"A": address_a}
    return a, b


def test_values_arrive_in_the_order_taken_whatever_order_they_were_sent() -> None:
    a, b = pair()
    a.send("B", "run", [((0, 2, "x"), np.full(3, 2.0))])
    a.send("B", "run", [((0, 1, "x"), np.full(3, 1.0)), ((0, 1, "y"), np.arange(4))])
    first = b.mailbox.take("run", (0, 1, "x"), "A", b)
    second = b.mailbox.take("run", (0, 2, "x"), "A", b)
    np.testing.assert_array_equal(first, np.full(3, 1.0))
    np.testing.assert_array_equal(second, np.full(3, 2.0))
    np.testing.assert_array_equal(b.mailbox.take("run", (0, 1, "y"), "A", b), np.arange(4))
    a.close(), b.close()


def test_arrays_keep_dtype_shape_and_bytes_and_scalars_and_tuples_pass() -> None:
    a, b = pair()
    values = [np.arange(12, dtype=np.float32).reshape(3, 4), np.asarray(3.5), np.arange(6)[::2], (1, "two")]
    a.send("B", "run", [((0, 0, f"v{i}"), v) for i, v in enumerate(values)])
    for i, sent in enumerate(values):
        got = b.mailbox.take("run", (0, 0, f"v{i}"), "A", b)
        if isinstance(sent, tuple):
            assert got == sent
        else:
            assert got.dtype == sent.dtype and got.shape == sent.shape
            np.testing.assert_array_equal(got, sent)
    a.close(), b.close()


def test_two_devices_sending_each_other_large_values_at_once_do_not_wait_for_each_other() -> None:
    """Each write would block on a full socket; a writer reads what the other sent meanwhile."""
    a, b = pair()
    big = np.random.default_rng(0).random(4_000_000)  # 32 MB: far past any socket buffer
    got: dict[str, np.ndarray] = {}

    def side(me: Links, peer: str) -> None:
        me.send(peer, "run", [((0, 0, "big"), big)])
        got[me.device] = me.mailbox.take("run", (0, 0, "big"), peer, me)

    threads = [threading.Thread(target=side, args=(a, "B")), threading.Thread(target=side, args=(b, "A"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "the two senders waited for each other"
    np.testing.assert_array_equal(got["A"], big)
    np.testing.assert_array_equal(got["B"], big)
    a.close(), b.close()


def test_a_peer_that_closes_fails_the_wait_for_its_values_at_once_naming_it() -> None:
    a, b = pair()
    a.send("B", "run", [((0, 0, "x"), np.ones(2))])
    np.testing.assert_array_equal(b.mailbox.take("run", (0, 0, "x"), "A", b), np.ones(2))
    started = time.monotonic()
    threading.Timer(0.3, a.close).start()
    with pytest.raises(RunError, match="'x' of step 1 cannot come from A: its worker closed the link"):
        b.mailbox.take("run", (0, 1, "x"), "A", b)
    assert time.monotonic() - started < 3.0
    b.close()


def test_values_that_arrived_before_the_peer_closed_are_still_taken() -> None:
    a, b = pair()
    a.send("B", "run", [((0, 5, "x"), np.ones(2))])
    a.close()
    np.testing.assert_array_equal(b.mailbox.take("run", (0, 5, "x"), "A", b), np.ones(2))
    b.close()


def test_an_aborted_run_wakes_a_waiting_taker_at_once() -> None:
    a, b = pair()
    a.send("B", "run", [((0, 0, "x"), np.ones(2))])  # the stream is open: the taker polls it
    started = time.monotonic()
    threading.Timer(0.3, b.mailbox.abort, args=("run", "the run failed: op 'k' on GPU:1")).start()
    with pytest.raises(RunError, match="stopped waiting for 'y' of step 0 from A: the run failed"):
        b.mailbox.take("run", (0, 0, "y"), "A", b)
    assert time.monotonic() - started < 0.9  # woken by the abort, not by the poll's 1 s timeout
    a.close(), b.close()


def where(links: Links) -> Address:
    assert links.address is not None, "not listening"
    return links.address


def head(count: int, size: int) -> bytes:
    """A frame's head as the wire has it: the buffer count (HELLO for a hello) and the pickle's length."""
    return struct.pack("!IQ", count, size)


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other side closed ``sock`` (without waiting: False while it is open and silent)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def poll_until(links: Links, done: Callable[[], bool], within: float = 20.0) -> bool:
    """Poll ``links`` (as a waiting taker does) until ``done``; generous, for a busy machine."""
    deadline = time.monotonic() + within
    while not done():
        if time.monotonic() > deadline:
            return False
        links.poll(0.05)
    return True


def the_value_still_passes(a: Links, b: Links, step: int) -> None:
    """What strangers must not touch: A's next value reaches B, exactly."""
    sent = np.arange(5.0) * (step + 1)
    a.send("B", "run", [((0, step, "x"), sent)])
    np.testing.assert_array_equal(b.mailbox.take("run", (0, step, "x"), "A", b), sent)


def test_a_stream_without_the_secret_is_closed_unread() -> None:
    """Nothing a stranger sends is unpickled: the stream must prove the cluster's secret first."""
    a, b = pair()
    host, port = b.book["A"].host, b.book["A"].port
    data = socket.create_connection((host, port))
    data.sendall(head(1, 8) + b"\x00" * 8)  # data before any hello
    wrong = socket.create_connection((host, port))
    wrong.sendall(hello(b"w" * 32, "B"))  # a hello of the right size with a wrong secret
    waits = socket.create_connection((host, port))  # once, the secret was checked only after the 1 MiB came
    waits.sendall(head(HELLO, 1 << 20) + b"w" * 32 + b"B")
    assert poll_until(a, lambda: closed_by_peer(data) and closed_by_peer(wrong) and closed_by_peer(waits))
    assert a.incoming == {} and a.pending == {}, "a stream without the secret was kept"
    assert a.mailbox._items == {}  # noqa: SLF001 - nothing was read as data
    a.close(), b.close()


@pytest.mark.parametrize("declared", [2**62, 256 << 20, HELLO_BYTES - 12 + 1],
                         ids=["2^62 bytes", "256 MiB", "one byte more than a hello"])
def test_a_stranger_declaring_a_size_is_closed_at_once_and_nothing_is_allocated(declared: int) -> None:
    """Once: 2^62 ended the run (MemoryError); 256 MiB was allocated in every worker before the secret."""
    a, b = pair()
    the_value_still_passes(a, b, 0)
    stranger = socket.create_connection((where(b).host, where(b).port))
    stranger.sendall(head(HELLO, declared) + SECRET)  # it even knows the secret: the size alone refuses it
    tracemalloc.start()
    try:
        closed = poll_until(b, lambda: closed_by_peer(stranger))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak:,} bytes were allocated while reading a stranger's stream"
    assert closed, "the stranger's stream is still open"
    the_value_still_passes(a, b, 1)
    assert list(b.incoming.values())[0].sender == "A" and len(b.incoming) == 1
    a.close(), b.close()


def raise_descriptor_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"this test needs {needed} file descriptors; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def test_1100_connections_neither_end_a_run_nor_stay_open_beyond_the_cap() -> None:
    """Once: 1,100 connections ended the run (select() cannot watch a descriptor above 1023)."""
    raise_descriptor_limit(4096)
    a, b = pair()
    c = Links("C", Mailbox())
    c.listen("127.0.0.1", SECRET)
    c.book, b.book = {"B": where(b)}, {**b.book, "C": where(c)}
    the_value_still_passes(a, b, 0)  # A's stream is open before the strangers come; C's opens after
    got: list[Any] = []
    taker = threading.Thread(target=lambda: got.append(_take_or_error(b, (0, 1, "x"), "C")))
    taker.start()  # B polls (accepting the strangers) while it waits for C's value

    def b_waits() -> bool:
        assert taker.is_alive(), f"B stopped waiting for C's value: {got}"
        return True

    strangers = [connect(where(b), unix=bool(i % 2), while_=b_waits) for i in range(1100)]
    c.send("B", "run", [((0, 1, "x"), np.full(2, 7.0))])
    taker.join(timeout=60)
    assert not taker.is_alive(), "B still waits for C's value"
    assert len(got) == 1 and not isinstance(got[0], BaseException), got
    np.testing.assert_array_equal(got[0], np.full(2, 7.0))
    the_value_still_passes(a, b, 2)
    assert len(b.pending) <= links_module.MAX_PENDING
    assert sum(closed_by_peer(s) for s in strangers) >= 1100 - links_module.MAX_PENDING
    assert {s.sender for s in b.incoming.values()} == {"A", "C"}
    for sock in strangers:
        sock.close()
    a.close(), b.close(), c.close()


def connect(address: Address, unix: bool, while_: Callable[[], bool]) -> socket.socket:
    """A stranger's connection, waiting while the listener's backlog is full (the listener drains it)."""
    deadline = time.monotonic() + 30
    while True:
        assert while_(), "the listener's side stopped polling"
        sock = socket.socket(socket.AF_UNIX if unix else socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(30)
        try:
            sock.connect(address.local if unix else (address.host, address.port))
            return sock
        except BlockingIOError:  # a Unix listener's backlog is full
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _take_or_error(links: Links, tag: tuple[int, int, str], sender: str) -> Any:
    try:
        return links.mailbox.take("run", tag, sender, links)
    except BaseException as exc:  # noqa: BLE001 - the test reads it
        return exc


def test_a_stream_slow_to_say_hello_is_closed_after_the_time_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(links_module, "HELLO_SECONDS", 0.5)
    a, b = pair()
    silent = socket.create_connection((where(b).host, where(b).port))
    halfway = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    halfway.connect(where(b).local)
    halfway.sendall(hello(SECRET, "A")[:HELLO_BYTES // 2])  # the right start, then nothing more
    the_value_still_passes(a, b, 0)
    assert poll_until(b, lambda: closed_by_peer(silent) and closed_by_peer(halfway))
    assert b.pending == {}
    the_value_still_passes(a, b, 1)
    a.close(), b.close()


@pytest.mark.parametrize("frame, why", [
    (head(0, 2**62), "it declared a frame of 4,611,686,018,427,387,904 bytes in 0 buffers"),
    (head(1, 4) + struct.pack("!Q", 2**45) + b"junk", "it declared a frame of 35,184,372,088,836 bytes"),
    (head(0, 4) + b"junk", "its frame could not be read: UnpicklingError"),
], ids=["2^62 bytes", "a 32 TiB buffer", "not a pickle"])
def test_a_bad_frame_from_a_proven_peer_fails_that_link_naming_it(frame: bytes, why: str) -> None:
    """The secret is proven, so this is one of ours gone wrong: its values cannot come, and the wait says why."""
    a, b = pair()
    the_value_still_passes(a, b, 0)
    peer = socket.create_connection((where(b).host, where(b).port))
    peer.sendall(hello(SECRET, "A") + frame)  # A again (a restarted worker, say), sending nonsense
    with pytest.raises(RunError, match=re.escape(f"'x' of step 1 cannot come from A: the link from it failed ({why}")):
        b.mailbox.take("run", (0, 1, "x"), "A", b)
    assert closed_by_peer(peer)
    a.close(), b.close()


POLYFIT = Path(__file__).resolve().parent.parent / "examples" / "polyfit.yaml"


@pytest.mark.cluster
def test_a_gang_loop_sends_over_links_and_its_report_pictures_a_step(tmp_path: Path) -> None:
    """polyfit's windows with a worker process per device: values over direct links, and the step picture of
    its sampled steps."""
    from orchestrator import run_file

    from spec_helpers import polyfit_in

    result = run_file(polyfit_in(tmp_path, "device"), echo=lambda _: None, params={"steps": 400, "window": 100}, write_outputs=False)
    report = result.report
    assert report["transport"] == "links"
    picture = report["loop_steps"]["train"]
    assert picture["sampled_steps"] == [2, 102, 202, 302]  # the third step of each window, read beside the second
    gpu0 = "/job:worker/replica:0/task:0/device:GPU:0"
    ps = "/job:ps/replica:0/task:0/device:CPU:0"
    assert set(picture["devices"][gpu0]["compute"]) == {"train/towers/0/x", "train/towers/0/grad",
                                                         "train/towers/0/loss"}
    assert picture["devices"][ps]["compute"]["train/step"] > 0
    parts = picture["devices"][gpu0]
    # medians of each part: they need not add up to the median step, but none exceeds it by much
    assert parts["step"] > 0 and all(parts[k] >= 0 for k in ("wait", "send", "overhead"))
    assert max(parts["compute"].values()) <= parts["step"]
    path = picture["critical_path"]
    kinds = [(seg["device"], seg["kind"]) for seg in path["segments"]]
    # one period ends with Adam on the ps and w going out; it reaches back into a GPU's tower when the ps
    # waited for its gradient (else the ps, busy, is the whole path)
    assert (ps, "op") in kinds
    assert {k for _, k in kinds} <= {"op", "wait", "send", "transit", "overhead"}
    assert kinds[-1] == (ps, "send") or kinds[-1] == (ps, "overhead")
    assert [seg["name"] for seg in path["segments"] if seg["kind"] == "op"][-1] == "train/step"
    assert path["seconds"] == pytest.approx(sum(seg["seconds"] for seg in path["segments"]))
    w = np.asarray(result.values["train.w"])
    assert w.shape == (3,) and np.isfinite(w).all()


@pytest.mark.cluster
def test_a_gang_window_logs_each_op_placement_once_per_window(tmp_path: Path) -> None:
    """TF logs a placement once per graph: a window logs each body op at its first step, not 100 times."""
    import io
    import shutil

    from orchestrator.cli import run_cli

    spec = tmp_path / "polyfit.yaml"
    shutil.copy(POLYFIT, spec)
    shutil.copy(POLYFIT.parent / "polyfit_fns.py", tmp_path / "polyfit_fns.py")
    text = spec.read_text().replace("placement:\n", "placement:\n  log: true\n")
    spec.write_text(text)
    out = io.StringIO()
    code = run_cli(["run", str(spec), "--set", "steps=300", "--set", "window=100", "--no-progress",
                    "--output-dir", str(tmp_path)], out=out)
    assert code == 0, out.getvalue()
    lines = [line for line in out.getvalue().splitlines() if line.startswith("Executing op ")]
    adam = [line for line in lines if "(train/step)" in line]
    assert adam == ["Executing op Call (train/step) in device /job:ps/replica:0/task:0/device:CPU:0"] * 3
    assert len([line for line in lines if "(train/towers/0/grad)" in line]) == 3
