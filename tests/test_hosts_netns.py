"""Two simulated hosts (Linux network namespaces joined by a veth pair): a loop across them, and a lost link.

Everything is real: the namespaces and the shaped veth pair of
``benchmarks/netns.py``, a ``dask scheduler`` and the client on host A, an
``orchestrate worker`` per task on either host. Needs root and iproute2
(B7's machine, CI as root); skipped elsewhere, saying why. The namespaces
(``orch-b7t-a``, ``orch-b7t-b``: not the benchmark's, so both may run at
once) and every process in them are removed after the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from lost_link import TWO_HOSTS, lose_link_mid_run, polyfit_spec  # noqa: E402
from netns import ADDRESSES, Cluster, Hosts, run_client, unavailable  # noqa: E402

WHY_NOT = unavailable()
pytestmark = [pytest.mark.cluster, pytest.mark.faults]
needs_namespaces = pytest.mark.skipif(WHY_NOT is not None, reason=f"two network namespaces: {WHY_NOT}")


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    with Hosts(tag="b7t") as made:
        yield made
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed for ns in made.namespaces), listed


@needs_namespaces
def test_a_loop_runs_across_two_hosts(hosts: Hosts, tmp_path: Path) -> None:
    """polyfit (a process per device) with its GPUs on host B: the windows' values cross the veth over the
    direct links."""
    with Cluster(hosts, polyfit_spec(), TWO_HOSTS, str(tmp_path)) as cluster:
        worker_log = (tmp_path / "worker0.log").read_text()
        assert f"device:GPU:0 at tcp://{ADDRESSES[1]}:" in worker_log, worker_log
        report = tmp_path / "run.json"
        _, code, out = run_client(hosts, ["run", polyfit_spec(), "--scheduler", cluster.address, "--set", "steps=300",
                                          "--report", str(report), "--output-dir", str(tmp_path / "out")], 120)
        assert code == 0, out
    data = json.loads(report.read_text())
    assert data["transport"] == "links", data["transport"]
    assert "train.w =" in out


@needs_namespaces
def test_a_lost_link_ends_the_run_in_one_line_within_10_s(hosts: Hosts) -> None:
    """The link goes dark mid-loop (no FIN, no RST): one line, exit 1, within 10 s, nothing left running."""
    r = lose_link_mid_run(hosts, limit=60.0)
    log = Path(r["logs"]) / "client.log"
    text = log.read_text()
    assert not r["hung"], f"still running {r['limit_s']} s after the link went down:\n{text[-3000:]}"
    assert r["exit_code"] == 1, text
    assert not r["traceback"], text
    errors = [line for line in text.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and r["last_line"] == errors[0], text
    assert "GPU" in errors[0], errors[0]  # it names a device across the link
    assert r["seconds_to_exit"] <= 10.0, f"{r['seconds_to_exit']} s:\n{text[-3000:]}"
    assert not r["client_left_running"]
    assert not hosts.pids(), "the cluster's processes outlived it"


def test_not_root_is_a_reason_to_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a machine without root says (the benchmark then writes {"skipped": why} and exits 0)."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert unavailable() == "making network namespaces needs root"
