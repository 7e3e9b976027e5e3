"""Direct links between device workers (runtime.links): real sockets on loopback, two `Links` per test.

Each side is what one worker holds: a listener, a mailbox, streams opened by
the sender. The waiting side reads its streams itself, so these tests take
values in the test's thread exactly as a window's thread does.
"""

from __future__ import annotations

from pathlib import Path

import socket
import threading
import time

import numpy as np
import pytest

from orchestrator.errors import RunError
from orchestrator.runtime import Mailbox
from orchestrator.runtime.links import HELLO, Links, encode

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


def test_a_stream_without_the_secret_is_closed_unread() -> None:
    """Nothing a stranger sends is unpickled: the stream must prove the cluster's secret first."""
    a, b = pair()
    host, port = b.book["A"].host, b.book["A"].port
    stranger = socket.create_connection((host, port))
    name = b"A"
    stranger.sendall(encode([("run", (0, 0, "x"), np.ones(1))])[0][:4] + b"\x00" * 8)  # data before any hello
    wrong = socket.create_connection((host, port))
    head = HELLO.to_bytes(4, "big") + (32 + len(name)).to_bytes(8, "big")
    wrong.sendall(head + b"w" * 32 + name)
    for _ in range(20):
        a.poll(0.05)
    assert a.incoming == {}, "a stream without the secret was kept"
    stranger.settimeout(5), wrong.settimeout(5)
    assert stranger.recv(1) == b"" and wrong.recv(1) == b""  # closed by the listener's side
    assert a.mailbox._items == {}  # noqa: SLF001 - nothing was read as data
    a.close(), b.close()



POLYFIT = Path(__file__).resolve().parent.parent / "examples" / "polyfit.yaml"


@pytest.mark.cluster
def test_a_gang_loop_sends_over_links_and_its_report_pictures_a_step() -> None:
    """polyfit's windows: values over direct links, and the step picture of its sampled steps."""
    from orchestrator import run_file

    result = run_file(POLYFIT, echo=lambda _: None, params={"steps": 400, "window": 100}, write_outputs=False)
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
