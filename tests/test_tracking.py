"""--tensorboard and --mlflow: each loop's (and each sweep copy's) params and metrics in the files those tools
read (issue 28.4), read back here by a reader of our own (CRCs checked bit by bit, protobuf decoded), and by
the tools' own readers where they are installed."""

from __future__ import annotations

import contextlib
import io
import os
import struct
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from orchestrator.cli import run_cli

TRAIN = """\
version: 1
name: tracked
params:
  lr: {type: number, default: 0.5}
cluster: {jobs: {localhost: {gpus: 0}}}
graph:
  - {name: w0, op: constant, value: 8.0, device: /cpu:0}
  - {name: c0, op: constant, value: 0.0, device: /cpu:0}
  - name: fit
    iterate:
      steps: 6
      window: 3
      state: {w: w0, c: c0}
      body:
        - {name: w1, op: mul, inputs: [w], scalar: "${params.lr}"}
        - {name: c1, op: add, inputs: [c], scalar: 1.0}
        - {name: sq, op: mul, inputs: [w1, w1]}
      update: {w: w1, c: c1}
      metrics: {loss: sq}
      evaluate:
        every: 3
        body:
          - {name: v, op: add, inputs: [c], scalar: 100.0}
        metrics: {val: v}
outputs:
  fit.loss: loss.csv
"""

SWEEP = """\
version: 1
name: swept
cluster: {jobs: {localhost: {gpus: 0}}}
graph:
  - name: hp
    sweep:
      grid: {lr: [0.5, 0.25]}
      body:
        - {name: w0, op: constant, value: 4.0, device: /cpu:0}
        - name: train
          iterate:
            steps: 3
            state: {w: w0}
            body:
              - {name: w1, op: mul, inputs: [w, lr]}
            update: {w: w1}
            metrics: {wv: w1}
      gather: {ws: train.w}
outputs:
  hp.ws: ws.npy
"""


# ------------------------------------------------------------------ a reader of our own, apart from the writer

def crc32c_bitwise(data: bytes) -> int:
    """CRC-32C bit by bit (the writer uses a table)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 * (crc & 1))
    return crc ^ 0xFFFFFFFF


def unmask(masked: int) -> int:
    rot = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


def records(path: Path) -> list[bytes]:
    data, out, at = path.read_bytes(), [], 0
    while at < len(data):
        head = data[at:at + 8]
        (length,), (head_crc,) = struct.unpack("<Q", head), struct.unpack("<I", data[at + 8:at + 12])
        assert unmask(head_crc) == crc32c_bitwise(head), f"bad length CRC at {at}"
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        assert unmask(body_crc) == crc32c_bitwise(body), f"bad data CRC at {at}"
        out.append(body)
        at += 16 + length
    assert at == len(data)
    return out


def fields(message: bytes) -> list[tuple[int, Any]]:
    """A protobuf message's (field number, value): varints as ints, fixed64/32 as bytes, others as bytes."""
    out, at = [], 0

    def varint() -> int:
        nonlocal at
        value = shift = 0
        while True:
            byte = message[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while at < len(message):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            out.append((number, varint()))
        elif wire == 1:
            out.append((number, message[at:at + 8]))
            at += 8
        elif wire == 5:
            out.append((number, message[at:at + 4]))
            at += 4
        else:
            assert wire == 2, wire
            size = varint()
            out.append((number, message[at:at + size]))
            at += size
    return out


def scalars(path: Path) -> tuple[str, dict[str, list[tuple[int, float]]]]:
    """An event file's version and its scalars: tag -> (step, value) in order."""
    events = [dict(fields(event)) for event in records(path)]
    version = events[0][3].decode()
    found: dict[str, list[tuple[int, float]]] = {}
    for event in events[1:]:
        assert struct.unpack("<d", event[1])[0] > 1e9  # wall time, seconds since the epoch
        for number, value in fields(event[5]):
            assert number == 1
            parts = dict(fields(value))
            found.setdefault(parts[1].decode(), []).append((event[2], struct.unpack("<f", parts[2])[0]))
    return version, found


def mlflow_runs(root: Path) -> dict[str, dict[str, Any]]:
    """Each MLflow run by its runName tag: its experiment's name, meta, params, tags and metric lines."""
    runs = {}
    for meta in root.glob("*/*/meta.yaml"):
        folder = meta.parent
        experiment = (folder.parent / "meta.yaml").read_text()
        read = {p.name: p.read_text() for p in (folder / "tags").iterdir()}
        runs[read["mlflow.runName"]] = {
            "experiment": experiment, "meta": meta.read_text(), "tags": read,
            "params": {p.name: p.read_text() for p in (folder / "params").iterdir()},
            "metrics": {p.name: [line.split() for line in p.read_text().splitlines()]
                        for p in (folder / "metrics").iterdir()}}
    return runs


# ------------------------------------------------------------------ runs

def run(tmp_path: Path, text: str, *flags: str, sync: bool = True) -> tuple[int, str]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stderr(out):
        code = run_cli(["run", str(spec), *(["--sync"] if sync else []), *flags], out=out)
    return code, out.getvalue()


def test_a_training_loop_is_one_tensorboard_run_and_one_mlflow_run(tmp_path: Path) -> None:
    code, said = run(tmp_path, TRAIN, "--set", "lr=0.5", "--tensorboard", str(tmp_path / "tb"),
                     "--mlflow", str(tmp_path / "mlruns"))
    assert code == 0, said
    loss = [(int(s), float(v)) for s, v in enumerate(np.loadtxt(tmp_path / "loss.csv", ndmin=1), start=1)]
    [events] = list((tmp_path / "tb" / "tracked").glob("*/fit/events.out.tfevents.*"))
    version, found = scalars(events)
    assert version == "brain.Event:2"
    assert sorted(found) == ["loss", "val"]
    assert [s for s, _ in found["loss"]] == [1, 2, 3, 4, 5, 6]
    np.testing.assert_allclose([v for _, v in found["loss"]], [v for _, v in loss], rtol=1e-6)
    assert found["val"] == [(3, 103.0), (6, 106.0)]  # c counts the steps done; evaluated after steps 3 and 6
    runs = mlflow_runs(tmp_path / "mlruns")
    assert set(runs) == {"fit"}
    fit = runs["fit"]
    assert 'name: "tracked"' in fit["experiment"] and "status: 3\n" in fit["meta"]
    assert fit["params"] == {"lr": "0.5"}
    assert [(int(step), float(value)) for _, value, step in fit["metrics"]["loss"]] == loss
    assert [int(step) for _, _, step in fit["metrics"]["val"]] == [3, 6]
    np.testing.assert_allclose([v for _, v in found["val"]], [float(v) for _, v, _ in fit["metrics"]["val"]])
    assert (tmp_path / "mlruns" / "0" / "meta.yaml").is_file()  # MLflow's Default experiment, as it makes it


def test_a_second_run_adds_files_and_keeps_the_first(tmp_path: Path) -> None:
    flags = ("--tensorboard", str(tmp_path / "tb"), "--mlflow", str(tmp_path / "mlruns"))
    assert run(tmp_path, TRAIN, *flags)[0] == 0
    first = {p: p.read_bytes() for p in tmp_path.glob("tb/**/*") if p.is_file()}
    first_runs = list((tmp_path / "mlruns").glob("*/*/meta.yaml"))
    assert run(tmp_path, TRAIN, "--set", "lr=0.25", *flags)[0] == 0
    assert all(p.read_bytes() == data for p, data in first.items())
    assert len(list(tmp_path.glob("tb/tracked/*/fit/events.*"))) == 2
    experiments = [p for p in (tmp_path / "mlruns").iterdir() if p.is_dir()]
    assert sorted(p.name for p in experiments) == ["0", "1"]  # the spec's experiment again, not a new one
    assert len(list((tmp_path / "mlruns").glob("1/*/meta.yaml"))) == 2 and all(p.exists() for p in first_runs)
    params = sorted(p.read_text() for p in (tmp_path / "mlruns").glob("1/*/params/lr"))
    assert params == ["0.25", "0.5"]


@pytest.mark.cluster
def test_each_sweep_copy_is_a_run_with_its_values_as_params(tmp_path: Path) -> None:
    """On a Dask cluster (the other tests run --sync: the same loops, in this process)."""
    code, said = run(tmp_path, SWEEP, "--tensorboard", str(tmp_path / "tb"), "--mlflow", str(tmp_path / "mlruns"),
                     sync=False)
    assert code == 0, said
    runs = mlflow_runs(tmp_path / "mlruns")
    assert len(runs) == 2
    by_lr = {run["params"]["lr"]: run for run in runs.values()}
    assert set(by_lr) == {"0.5", "0.25"}
    for lr, tracked in by_lr.items():
        expected = [4.0 * float(lr) ** step for step in (1, 2, 3)]
        assert [float(value) for _, value, _ in tracked["metrics"]["wv"]] == pytest.approx(expected)
        assert tracked["tags"]["orchestrator.sweep"] == "hp" and tracked["tags"]["orchestrator.copy"]
    folders = sorted(p.parent.relative_to(next((tmp_path / "tb" / "swept").iterdir()))
                     for p in (tmp_path / "tb" / "swept").glob("*/**/events.out.tfevents.*"))
    assert len(folders) == 2 and len(set(folders)) == 2  # a TensorBoard run per copy, side by side
    for events in (tmp_path / "tb" / "swept").glob("*/**/events.out.tfevents.*"):
        _, found = scalars(events)
        assert [s for s, _ in found["wv"]] == [1, 2, 3]


def test_a_loop_of_loops_tracks_each_loop_and_numbers_the_inner_steps_across_passes(tmp_path: Path) -> None:
    from test_loops import NESTED, _nested_reference

    code, said = run(tmp_path, textwrap.dedent(NESTED), "--tensorboard", str(tmp_path / "tb"),
                     "--mlflow", str(tmp_path / "mlruns"))
    assert code == 0, said
    runs = mlflow_runs(tmp_path / "mlruns")
    assert set(runs) == {"epochs", "epochs/batches"}
    outer = [(int(step), float(value)) for _, value, step in runs["epochs"]["metrics"]["m"]]
    assert [step for step, _ in outer] == [1, 2, 3]  # the outer loop's steps, each written as it was read
    np.testing.assert_allclose([value for _, value in outer], _nested_reference()[1], rtol=1e-12)
    inner = [int(step) for _, _, step in runs["epochs/batches"]["metrics"]["s"]]
    assert inner == list(range(1, 13))  # pass e's batches are steps 4e+1 .. 4e+4
    events = {p.parent.name: scalars(p)[1] for p in tmp_path.glob("tb/*/*/*/events.out.tfevents.*")}
    assert [s for s, _ in events["epochs"]["m"]] == [1, 2, 3]
    assert [s for s, _ in events["epochs_batches"]["s"]] == list(range(1, 13))


def test_the_spec_can_ask_under_its_output_directory_and_a_flag_overrides_it(tmp_path: Path) -> None:
    keyed = TRAIN.replace("outputs:\n", "run: {output_dir: out, tensorboard: tb, mlflow: mlruns}\noutputs:\n")
    assert run(tmp_path, keyed)[0] == 0
    assert len(list(tmp_path.glob("out/tb/tracked/*/fit/events.out.tfevents.*"))) == 1
    assert set(mlflow_runs(tmp_path / "out" / "mlruns")) == {"fit"}
    assert run(tmp_path, keyed, "--mlflow", str(tmp_path / "elsewhere"))[0] == 0
    assert set(mlflow_runs(tmp_path / "elsewhere")) == {"fit"}  # the flag's folder, not the spec's
    assert len(list((tmp_path / "out" / "mlruns").glob("1/*/meta.yaml"))) == 1
    assert len(list(tmp_path.glob("out/tb/tracked/*/fit/events.out.tfevents.*"))) == 2
    code, said = run(tmp_path, keyed.replace("tensorboard: tb", "tensorboard: ../../tb"))
    assert code != 0 and "run.tensorboard '../../tb' escapes the output directory" in said, said
    code, said = run(tmp_path, keyed.replace("mlflow: mlruns", "mlflow: ../out/loss.csv"))
    assert code != 0 and "the MLflow folder (run.mlflow) and output 'fit.loss'" in said, said


def test_a_failed_run_keeps_the_metrics_it_read_and_marks_its_runs_failed(tmp_path: Path) -> None:
    (tmp_path / "fns.py").write_text("def check(c, sq, xp):\n    if float(c) > 6:\n"
                                     "        raise ValueError('diverged')\n    return sq\n", encoding="utf-8")
    text = TRAIN.replace("steps: 6", "steps: 9").replace("        - {name: sq, op: mul, inputs: [w1, w1]}\n",
                         "        - {name: sq0, op: mul, inputs: [w1, w1]}\n"
                         "        - {name: sq, op: call, fn: \"fns:check\", inputs: [c1, sq0], output: {shape: []}}\n")
    code, said = run(tmp_path, text, "--tensorboard", str(tmp_path / "tb"), "--mlflow", str(tmp_path / "mlruns"))
    assert code != 0 and "diverged" in said, said
    [fit] = mlflow_runs(tmp_path / "mlruns").values()
    assert "status: 4\n" in fit["meta"] and "end_time: null" not in fit["meta"]  # FAILED, and ended
    # the third window fails; the first is read before it is submitted (two in flight), the second may be
    steps = [int(step) for _, _, step in fit["metrics"]["loss"]]
    assert steps in ([1, 2, 3], [1, 2, 3, 4, 5, 6]), steps
    [events] = list(tmp_path.glob("tb/tracked/*/fit/events.out.tfevents.*"))
    assert [s for s, _ in scalars(events)[1]["loss"]] == steps
    assert not (tmp_path / "loss.csv").exists()


@pytest.mark.cluster
def test_a_sweep_copy_that_fails_is_a_failed_mlflow_run_while_the_others_finish(tmp_path: Path) -> None:
    from test_search_loops import FAILING, failing_spec

    spec = failing_spec(tmp_path, True)
    out = io.StringIO()
    code = run_cli(["run", str(spec), "--mlflow", str(tmp_path / "mlruns"), "--tensorboard", str(tmp_path / "tb")],
                   out=out)
    assert code == 0, out.getvalue()
    runs = mlflow_runs(tmp_path / "mlruns")
    assert len(runs) == 8
    status = {float(run["params"]["lr"]): run["meta"].split("status: ")[1].split()[0] for run in runs.values()}
    from test_halving import LRS

    assert status == {lr: "4" if i == FAILING else "3" for i, lr in enumerate(LRS)}
    assert len(list(tmp_path.glob("tb/*/*/*/events.out.tfevents.*"))) == 8


def test_a_folder_that_is_a_file_or_an_output_is_refused_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("mine\n")
    code, said = run(tmp_path, TRAIN, "--tensorboard", str(tmp_path / "taken"))
    assert code != 0 and "--tensorboard" in said and "is a file, not a folder" in said, said
    assert (tmp_path / "taken").read_text() == "mine\n" and not (tmp_path / "loss.csv").exists()
    code, said = run(tmp_path, TRAIN, "--mlflow", str(tmp_path / "loss.csv"))
    assert code != 0 and "the MLflow folder (--mlflow)" in said and "output 'fit.loss'" in said, said
    assert "Traceback" not in said


def test_a_folder_that_cannot_be_made_is_refused(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("mine\n")
    code, said = run(tmp_path, TRAIN, "--mlflow", str(tmp_path / "plain" / "mlruns"))
    assert code != 0 and "--mlflow" in said and "cannot make the folder" in said, said
    assert (tmp_path / "plain").read_text() == "mine\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_an_unwritable_folder_is_refused(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        code, said = run(tmp_path, TRAIN, "--tensorboard", str(locked))
    finally:
        locked.chmod(0o700)
    assert code != 0 and "--tensorboard" in said and "not writable" in said, said


def test_the_real_readers_read_our_files(tmp_path: Path) -> None:
    """Where TensorBoard or MLflow is installed (``pip install orchestrator[tensorboard]`` / ``[mlflow]``)."""
    readers = [name for name in ("tensorboard", "mlflow") if _installed(name)]
    if not readers:
        pytest.skip("neither tensorboard nor mlflow is installed (our own reader checks the files above)")
    assert run(tmp_path, TRAIN, "--tensorboard", str(tmp_path / "tb"), "--mlflow", str(tmp_path / "mlruns"))[0] == 0
    if "tensorboard" in readers:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        [folder] = list(tmp_path.glob("tb/tracked/*/fit"))
        acc = EventAccumulator(str(folder))
        acc.Reload()
        assert [e.step for e in acc.Scalars("loss")] == [1, 2, 3, 4, 5, 6]
        assert [e.value for e in acc.Scalars("val")] == [103.0, 106.0]
    if "mlflow" in readers:
        import mlflow

        client = mlflow.tracking.MlflowClient(tracking_uri=f"file:{tmp_path / 'mlruns'}")
        experiment = client.get_experiment_by_name("tracked")
        [found] = client.search_runs([experiment.experiment_id])
        assert found.data.params == {"lr": "0.5"} and found.info.status == "FINISHED"
        assert [m.step for m in client.get_metric_history(found.info.run_id, "loss")] == [1, 2, 3, 4, 5, 6]


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None

