"""Two simulated hosts on one machine, for B7 and tests/test_hosts_netns.py.

Host A and host B are Linux network namespaces (``orch-b7-a``, ``orch-b7-b``;
the tests' are ``orch-b7t-a``, ``orch-b7t-b``) joined by one veth pair
(``b7-a`` 10.77.0.1/24, ``b7-b`` 10.77.0.2/24), each with its loopback up. Both ends are shaped like a data-centre link: 1 Gbit/s
(``tc tbf``) and 0.5 ms of delay each way (``tc netem``) where the kernel has
netem; some kernels lack it, and then the link is measured without the delay
and :class:`Link` says so. Processes started in a namespace see only its
interfaces, so every byte between host A and host B crosses the shaped veth,
while the file system (the spec, the venv, the user modules) is shared, as
docs/clusters.md asks of real hosts.

Everything made here is removed again: leftovers of an earlier run at the
start, and on exit every process left in either namespace (``ip netns pids``)
and the namespaces themselves (deleting one deletes its veth end, and the
pair with it). Needs root and iproute2; :func:`unavailable` says why not.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Sequence

VETH = ("b7-a", "b7-b")
ADDRESSES = ("10.77.0.1", "10.77.0.2")
RATE = "1gbit"
BURST = "32kbit"  # tbf's bucket; ~900 Mbit/s measured through it with 1 MiB writes
DELAY_MS = 0.5


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _tc(namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", namespace, "tc", *args], capture_output=True, text=True,
                          timeout=30)


def unavailable() -> str | None:
    """Why two namespaces cannot be made here (not root, no ``ip``/``tc``, no netns support), or None."""
    if not sys.platform.startswith("linux"):
        return f"network namespaces are Linux only (this is {sys.platform})"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"'{tool}' (iproute2) is not installed"
    probe = f"orch-probe-{os.getpid()}"
    _ip("netns", "del", probe, check=False)
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"'ip netns add' failed: {made.stderr.strip() or made.returncode}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass
class Link:
    """How the veth pair is shaped: the rate always, the delay only where netem exists."""

    rate: str = RATE
    delay_ms: float | None = None  # None: no netem in this kernel, no delay added
    netem_note: str = ""
    qdiscs: dict[str, str] = field(default_factory=dict)  # each end's `tc qdisc show`

    def describe(self) -> str:
        delay = f"{self.delay_ms:g} ms delay each way (netem)" if self.delay_ms is not None else \
            f"no delay: {self.netem_note}"
        return f"veth pair, {self.rate} (tbf), {delay}"


def _shape(namespace: str, dev: str, delay_ms: float) -> tuple[bool, str]:
    """netem (delay) at the root with tbf (rate) under it, else tbf alone; (netem works, why not)."""
    tbf = ["tbf", "rate", RATE, "burst", BURST, "latency", "400ms"]
    netem = _tc(namespace, "qdisc", "add", "dev", dev, "root", "handle", "1:", "netem", "delay", f"{delay_ms}ms")
    if netem.returncode == 0:
        child = _tc(namespace, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", *tbf)
        if child.returncode == 0:
            return True, ""
        # netem that takes no child: the other order (tbf at the root, netem under it)
        _tc(namespace, "qdisc", "del", "dev", dev, "root")
        root = _tc(namespace, "qdisc", "add", "dev", dev, "root", "handle", "1:", *tbf)
        under = _tc(namespace, "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:", "netem", "delay",
                    f"{delay_ms}ms")
        if root.returncode == 0 and under.returncode == 0:
            return True, ""
        _tc(namespace, "qdisc", "del", "dev", dev, "root")
        why = f"netem and tbf do not stack here: {(child.stderr or under.stderr).strip()}"
    else:
        why = (f"this kernel has no netem qdisc (tc: {netem.stderr.strip() or netem.returncode}); "
               "measured without the 0.5 ms delay")
    done = _tc(namespace, "qdisc", "add", "dev", dev, "root", "handle", "1:", *tbf)
    if done.returncode != 0:
        raise RuntimeError(f"tc tbf on {dev} failed: {done.stderr.strip()}")
    return False, why


class Hosts:
    """The two namespaces (``orch-TAG-a``, ``orch-TAG-b``) while the ``with`` block runs.

    A benchmark and a test suite may run at once: each gives its own ``tag``.
    The veth ends are made inside the namespaces, so their names (and the
    addresses, and the scheduler's port) need not differ.
    """

    def __init__(self, tag: str = "b7", delay_ms: float = DELAY_MS):
        self.namespaces = (f"orch-{tag}-a", f"orch-{tag}-b")
        self.delay_ms = delay_ms
        self.link = Link()

    def __enter__(self) -> Hosts:
        self.remove()
        try:
            self._make()
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def _make(self) -> None:
        for ns in self.namespaces:
            _ip("netns", "add", ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("link", "add", VETH[0], "netns", self.namespaces[0], "type", "veth", "peer", "name", VETH[1],
            "netns", self.namespaces[1])
        notes = []
        for ns, dev, addr in zip(self.namespaces, VETH, ADDRESSES, strict=True):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            works, why = _shape(ns, dev, self.delay_ms)
            notes.append((works, why))
        if all(works for works, _ in notes):
            self.link.delay_ms = self.delay_ms
        else:
            self.link.netem_note = next(why for works, why in notes if not works)
            for ns, dev in zip(self.namespaces, VETH, strict=True):  # the same link both ways: tbf alone on both
                _tc(ns, "qdisc", "del", "dev", dev, "root")
                _tc(ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf", "rate", RATE, "burst", BURST,
                    "latency", "400ms")
        self.link.qdiscs = {dev: _tc(ns, "qdisc", "show", "dev", dev).stdout.strip()
                            for ns, dev in zip(self.namespaces, VETH, strict=True)}

    def prefix(self, host: int) -> list[str]:
        """The command prefix that runs a program on host ``host`` (0: A, 1: B)."""
        return ["ip", "netns", "exec", self.namespaces[host]]

    def pids(self, host: int | None = None) -> list[int]:
        hosts = range(len(self.namespaces)) if host is None else [host]
        out: list[int] = []
        for h in hosts:
            listed = _ip("netns", "pids", self.namespaces[h], check=False).stdout.split()
            out += [int(p) for p in listed if p.isdigit()]
        return out

    def kill_all(self, host: int | None = None, grace: float = 5.0) -> list[int]:
        """SIGTERM every process in the namespace(s), SIGKILL what is left after ``grace``; the pids found."""
        found = self.pids(host)
        _signal(found, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.pids(host):
            time.sleep(0.1)
        _signal(self.pids(host), signal.SIGKILL)
        return found

    def link_down(self, host: int = 1) -> None:
        """Take host ``host``'s end of the veth down: the other end loses its carrier, nothing crosses."""
        _ip("-n", self.namespaces[host], "link", "set", VETH[host], "down")

    def link_up(self, host: int = 1) -> None:
        """Back up (its address and qdiscs stayed; the kernel puts its route back)."""
        _ip("-n", self.namespaces[host], "link", "set", VETH[host], "up")

    def remove(self) -> None:
        """Kill what runs in the namespaces, then delete them (and the veth pair with them)."""
        listed = set(_ip("netns", "list", check=False).stdout.split())
        for h, ns in enumerate(self.namespaces):
            if ns in listed:
                self.kill_all(h, grace=3.0)
                _ip("netns", "del", ns, check=False)


def _signal(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


PROBE = """
import socket, sys, time
role, host = sys.argv[1], sys.argv[2]
if role == "serve":
    s = socket.create_server((host, 5999))
    for kind in ("ping", "bulk"):
        c, _ = s.accept()
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        total = 0
        while True:
            d = c.recv(1 << 20)
            if not d:
                break
            if kind == "ping":
                c.sendall(d)
            total += len(d)
        if kind == "bulk":
            c.sendall(str(total).encode())
        c.close()
else:
    for _ in range(50):
        try:
            c = socket.create_connection((host, 5999)); break
        except OSError:
            time.sleep(0.1)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rtts = []
    for _ in range(200):
        t = time.perf_counter(); c.sendall(b"x"); c.recv(64); rtts.append(time.perf_counter() - t)
    c.close()
    c = socket.create_connection((host, 5999)); block = bytes(1 << 20); t = time.perf_counter()
    for _ in range(100):
        c.sendall(block)
    c.shutdown(socket.SHUT_WR); n = int(c.recv(64)); seconds = time.perf_counter() - t
    print(sorted(rtts)[100] * 1e3, n * 8 / seconds / 1e6)
"""


def probe_link(hosts: Hosts) -> dict[str, float]:
    """What the link gives: median TCP round trip A→B→A (ms) and bulk throughput A→B (Mbit/s)."""
    server = subprocess.Popen([*hosts.prefix(1), sys.executable, "-c", PROBE, "serve", ADDRESSES[1]],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        done = subprocess.run([*hosts.prefix(0), sys.executable, "-c", PROBE, "client", ADDRESSES[1]],
                              capture_output=True, text=True, timeout=60, check=True)
        rtt, mbit = (float(x) for x in done.stdout.split())
    finally:
        server.kill()
        server.wait()
    return {"rtt_ms": rtt, "throughput_mbit_s": mbit}


# --------------------------------------------------------------------------- a cluster across the hosts

BIN = os.path.dirname(sys.executable)
# the scheduler settings docs/clusters.md recommends (a lost device fails an op after 5 s, not never)
SCHEDULER_ENV = {"DASK_DISTRIBUTED__SCHEDULER__NO_WORKERS_TIMEOUT": "5s",
                 "DASK_DISTRIBUTED__SCHEDULER__WORK_STEALING": "False"}
PORT = 8786  # each namespace has its own ports: nothing else on the machine can hold it


def command(name: str) -> list[str]:
    """The venv's console script (``orchestrate``, ``dask``), else its module."""
    script = os.path.join(BIN, name)
    if os.path.exists(script):
        return [script]
    return [sys.executable, "-c", "from orchestrator.entry import main; main()"] if name == "orchestrate" else \
        [sys.executable, "-m", "dask"]


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # as the embedded cluster does
        env.setdefault(var, "1")
    return {**env, **(extra or {})}


@dataclass
class Proc:
    """A process in a namespace, its output in files (no pipe can fill up and stop it)."""

    name: str
    popen: subprocess.Popen[bytes]
    out: str

    @classmethod
    def start(cls, hosts: Hosts, host: int, name: str, args: Sequence[str], logs: str,
              env: dict[str, str] | None = None) -> Proc:
        out = os.path.join(logs, f"{name}.log")
        with open(out, "wb") as handle:
            popen = subprocess.Popen([*hosts.prefix(host), *args], stdout=handle, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=child_env(env), start_new_session=True)
        return cls(name, popen, out)

    def text(self) -> str:
        with open(self.out, errors="replace") as handle:
            return handle.read()

    def wait_for(self, needle: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if self.popen.poll() is not None or time.monotonic() > deadline:
                state = f"exited {self.popen.returncode}" if self.popen.poll() is not None else f"{timeout:g} s passed"
                raise RuntimeError(f"{self.name}: no '{needle}' ({state}):\n{self.text()[-3000:]}")
            time.sleep(0.1)

    def stop(self, timeout: float = 15.0) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)


class Cluster:
    """``dask scheduler`` on host A and one ``orchestrate worker`` per task, on the host ``where`` gives it."""

    def __init__(self, hosts: Hosts, spec: str, where: dict[tuple[str, int], int], logs: str):
        self.hosts, self.spec, self.where, self.logs = hosts, spec, where, logs
        self.address = f"tcp://{ADDRESSES[0]}:{PORT}"
        self.procs: list[Proc] = []

    def __enter__(self) -> Cluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 120.0) -> None:
        os.makedirs(self.logs, exist_ok=True)
        scheduler = Proc.start(self.hosts, 0, "scheduler", [
            *command("dask"), "scheduler", "--host", ADDRESSES[0], "--port", str(PORT), "--no-dashboard",
            "--dashboard-address", f"{ADDRESSES[0]}:0"], self.logs, SCHEDULER_ENV)
        self.procs.append(scheduler)
        scheduler.wait_for("Scheduler at:", timeout)
        for (job, task), host in self.where.items():
            self.procs.append(Proc.start(self.hosts, host, f"{job}{task}", [
                *command("orchestrate"), "worker", self.spec, "--job", job, "--task", str(task),
                "--scheduler", self.address, "--host", ADDRESSES[host], "--timeout", "60"], self.logs))
        for proc in self.procs[1:]:
            proc.wait_for("serving ", timeout)

    def stop(self) -> None:
        """The task launchers first (they close their workers), then the scheduler; then anything left."""
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()
        self.hosts.kill_all()


def run_client(hosts: Hosts, args: Sequence[str], timeout: float) -> tuple[float, int, str]:
    """``orchestrate ARGS`` on host A: (wall seconds from start to exit, exit code, output)."""
    started = time.perf_counter()
    done = subprocess.Popen([*hosts.prefix(0), *command("orchestrate"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=child_env(), start_new_session=True)
    try:
        out, _ = done.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(done.pid, signal.SIGKILL)
        out, _ = done.communicate()
        raise TimeoutError(f"orchestrate {' '.join(args)} ran past {timeout:.0f} s:\n{out[-3000:]}") from None
    return time.perf_counter() - started, done.returncode, out


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of the live processes ``pids`` (from /proc; gone ones count 0)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total
