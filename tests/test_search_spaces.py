"""Search spaces of a sweep: grid, random, listed copies, globs, ${copy.NAME}, gather and combine (issue 21)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np

from orchestrator.api import Checked, check_file
from orchestrator.spec.constructs.space import copy_id
from orchestrator.spec.records import OpRef, Spec

HEAD = """\
version: 1
cluster: {jobs: {localhost: {gpus: 2}}}
params:
  lams: {type: list, default: [0.1, 1.0, 10.0]}
graph:
  - {name: x, op: ones, shape: [3], device: /cpu:0}
"""


def check(tmp_path: Path, sweep: str, outputs: str = "", overrides: dict[str, object] | None = None) -> Checked:
    path = tmp_path / "spec.yaml"
    body = textwrap.indent(textwrap.dedent(sweep), "  ")
    path.write_text(HEAD + body + (f"outputs:\n{textwrap.indent(textwrap.dedent(outputs), '  ')}" if outputs else ""),
                    encoding="utf-8")
    return check_file(path, params=overrides)


def valid(tmp_path: Path, sweep: str, outputs: str = "", overrides: dict[str, object] | None = None) -> Spec:
    checked = check(tmp_path, sweep, outputs, overrides)
    assert not checked.errors, [d.render() for d in checked.errors]
    assert checked.spec is not None
    return checked.spec


def errors(tmp_path: Path, sweep: str) -> list[str]:
    checked = check(tmp_path, sweep)
    assert checked.errors
    return [d.render() for d in checked.errors]


GRID = """\
- name: hp
  sweep:
    grid: {lam: "${params.lams}", degree: [1, 2]}
    spread: /gpu:*
    body:
      - {name: y, op: mul, inputs: [x, lam]}
      - {name: loss, op: sum, inputs: [y]}
    gather: {losses: loss}
"""


def test_a_grid_makes_every_combination_first_parameter_slowest(tmp_path: Path) -> None:
    spec = valid(tmp_path, GRID, "hp.losses: '-'\n")
    search = spec.sweeps[0]
    assert search.params == ("lam", "degree")
    assert [dict(c.values) for c in search.copies] == [
        {"lam": 0.1, "degree": 1}, {"lam": 0.1, "degree": 2}, {"lam": 1.0, "degree": 1},
        {"lam": 1.0, "degree": 2}, {"lam": 10.0, "degree": 1}, {"lam": 10.0, "degree": 2}]
    assert spec.op("hp/3/lam").params["value"] == 1.0 and spec.op("hp/3/degree").params["value"] == 2
    assert spec.op("hp.losses").kind == "stack"
    assert spec.op("hp.losses").inputs == tuple(OpRef(f"hp/{i}/loss") for i in range(6))
    assert spec.values["hp.losses"][0].shape == (6,)
    # copies take the GPUs in turn
    assert [spec.op(f"hp/{i}/y").device_chain[-1].spec.device_index for i in range(4)] == [0, 1, 0, 1]


def test_set_changes_the_grid_and_the_gathered_rows_follow(tmp_path: Path) -> None:
    spec = valid(tmp_path, GRID, "hp.losses: '-'\n", {"lams": [1.0, 2.0, 3.0, 4.0, 5.0]})
    assert len(spec.sweeps[0].copies) == 10
    assert spec.values["hp.losses"][0].shape == (10,)


def test_copy_ids_are_stable_hashes_of_the_values(tmp_path: Path) -> None:
    first = valid(tmp_path, GRID).sweeps[0].copies
    more = valid(tmp_path, GRID, overrides={"lams": [0.01, 0.1, 1.0, 10.0]}).sweeps[0].copies
    ids = {c.id: dict(c.values) for c in more}
    for copy in first:  # a copy keeps its id when others are added before it
        assert ids[copy.id] == dict(copy.values)
    assert copy_id({"degree": 1, "lam": 0.1}) == copy_id({"lam": 0.1, "degree": 1})
    assert len(ids) == 8


RANDOM = """\
- name: hp
  sweep:
    random:
      samples: 20
      seed: 7
      params:
        lam: {loguniform: [0.001, 100.0]}
        drop: {uniform: [0.0, 0.5]}
        width: {randint: [2, 5]}
        act: {choice: [relu, tanh]}
    body:
      - {name: y, op: mul, inputs: [x, lam]}
      - {name: loss, op: sum, inputs: [y], tags: ["${copy.act}"]}
"""


def test_random_draws_are_seeded_and_inside_their_bounds(tmp_path: Path) -> None:
    copies = [dict(c.values) for c in valid(tmp_path, RANDOM).sweeps[0].copies]
    again = [dict(c.values) for c in valid(tmp_path, RANDOM).sweeps[0].copies]
    assert copies == again and len(copies) == 20
    assert all(0.001 <= c["lam"] <= 100.0 and 0.0 <= c["drop"] <= 0.5 for c in copies)
    assert {c["width"] for c in copies} <= {2, 3, 4} and {c["act"] for c in copies} == {"relu", "tanh"}
    logs = np.log10([c["lam"] for c in copies])  # log-uniform: spread over the decades, not piled at the top
    assert logs.min() < 0 < logs.max()
    other = [dict(c.values) for c in valid(tmp_path, RANDOM.replace("seed: 7", "seed: 8")).sweeps[0].copies]
    assert other != copies


def test_text_values_reach_the_body_as_copy_uses(tmp_path: Path) -> None:
    spec = valid(tmp_path, RANDOM)
    for copy in spec.sweeps[0].copies:
        assert spec.op(f"{copy.prefix}loss").tags == (copy.values["act"],)
    assert "hp/0/act" not in spec.op_index  # text is not an op; numbers are
    assert spec.op("hp/0/width").params["value"] in (2, 3, 4)


def test_a_glob_gives_one_copy_per_file_and_load_keeps_its_shape_check(tmp_path: Path) -> None:
    (tmp_path / "shards").mkdir()
    for i in range(3):
        np.save(tmp_path / "shards" / f"part{i}.npy", np.full((4, 3), float(i)))
    spec = valid(tmp_path, """\
        - name: infer
          sweep:
            grid: {path: {glob: "shards/*.npy"}}
            body:
              - {name: part, op: load, path: "${copy.path}", shape: [4, 3], device: /cpu:0}
              - {name: s, op: sum, inputs: [part]}
            gather: {sums: s}
        """)
    assert [c.values["path"] for c in spec.sweeps[0].copies] == [f"shards{'/'}part{i}.npy" for i in range(3)]
    assert spec.op("infer/2/part").params == {"path": "shards/part2.npy", "shape": [4, 3]}


def test_listed_copies_and_a_weighted_ensemble_mean(tmp_path: Path) -> None:
    spec = valid(tmp_path, """\
        - name: ens
          sweep:
            copies: [{seed: 1, w: 1.0}, {seed: 2, w: 3.0}]
            body:
              - {name: noise, op: random.normal, shape: [3], seed: "${copy.seed}"}
              - {name: pred, op: add, inputs: [x, noise]}
            combine: {pred: {weighted_by: w}}
        """, "ens.pred: '-'\n")
    assert spec.op("ens/1/noise").params["seed"] == 2
    assert spec.op("ens.pred").kind == "mean_n" and spec.op("ens.pred").params["weights"] == [1.0, 3.0]


def test_space_errors_point_at_what_is_wrong(tmp_path: Path) -> None:
    assert any(":9:" in e and "has no values" in e for e in errors(tmp_path, """\
        - name: hp
          sweep:
            grid: {lam: [], k: [1]}
            body: [{name: y, op: mul, inputs: [x, lam]}]
        """))
    said = errors(tmp_path, RANDOM.replace("uniform: [0.0, 0.5]", "unifrom: [0.0, 0.5]"))
    assert any(":14:" in e and "'unifrom', which is not a distribution" in e and "did you mean 'uniform'" in e
               for e in said), said
    said = errors(tmp_path, RANDOM.replace("loguniform: [0.001, 100.0]", "loguniform: [0.0, 100.0]"))
    assert any("loguniform [0.0, 100.0] is empty" in e and "0 < low < high" in e for e in said), said
    said = errors(tmp_path, """\
        - name: hp
          sweep:
            grid: {path: {glob: "nothing/*.npy"}}
            body: [{name: part, op: load, path: "${copy.path}", device: /cpu:0}]
        """)
    assert any(":9:" in e and "matches no file" in e for e in said), said
    said = errors(tmp_path, """\
        - name: hp
          sweep:
            copies: [{seed: 1}, {seed: 1}]
            body: [{name: n, op: random.normal, shape: [2], seed: "${copy.sed}"}]
        """)
    assert any("copies 0 and 1 of sweep 'hp' have the same values" in e for e in said), said
    said = errors(tmp_path, """\
        - name: hp
          sweep:
            copies: [{seed: 1}, {seed: 2}]
            body: [{name: n, op: random.normal, shape: [2], seed: "${copy.sed}"}]
        """)
    assert any(":10:" in e and "${copy.sed}" in e and "no sweep around it" in e for e in said), said
    said = errors(tmp_path, GRID.replace("gather: {losses: loss}", "gather: {losses: los}"))
    assert any("gather names 'los'" in e and "did you mean 'loss'" in e for e in said), said
    said = errors(tmp_path, GRID.replace("gather:", "copies: [{a: 1}]\n    gather:"))
    assert any("one space, please" in e for e in said), said


def test_devices_still_spreads_the_copies_with_a_warning(tmp_path: Path) -> None:
    checked = check(tmp_path, GRID.replace("spread:", "devices:"))
    assert not checked.errors and checked.spec is not None
    assert any("devices: is now spread:" in d.message for d in checked.warnings)
    assert checked.spec.op("hp/1/y").device_chain[-1].spec.device_index == 1


def test_replicate_gives_each_copy_its_own_values_and_files(tmp_path: Path) -> None:
    (tmp_path / "shards").mkdir()
    for i in range(2):
        np.save(tmp_path / "shards" / f"part{i}.npy", np.full((4, 3), float(i)))
    spec = valid(tmp_path, """\
        - name: towers
          replicate:
            devices: /gpu:*
            values: {seed: [7, 8], shard: {glob: "shards/*.npy"}}
            body:
              - {name: part, op: load, path: "${copy.shard}", shape: [4, 3], device: /cpu:0}
              - {name: noise, op: random.normal, shape: [4, 3], seed: "${copy.seed}"}
              - {name: y, op: add, inputs: [part, noise]}
              - {name: s, op: mul, inputs: [y, seed]}
            combine: {s: concat}
        """, "towers.s: '-'\n")
    assert spec.op("towers/1/noise").params["seed"] == 8
    assert spec.op("towers/0/part").params["path"] == "shards/part0.npy"
    assert spec.op("towers/1/s").inputs[1] == OpRef("towers/1/seed")
    assert spec.op("towers/1/seed").params["value"] == 8
    said = errors(tmp_path, """\
        - name: towers
          replicate:
            devices: /gpu:*
            values: {seed: [7, 8, 9]}
            body: [{name: n, op: random.normal, shape: [2], seed: "${copy.seed}"}]
        """)
    assert any(":10:" in e and "2 copies (one per device) but 3 values of 'seed'" in e for e in said), said
