"""Fold a spec's GPUs onto the GPUs a machine has, as virtual GPUs (``make gpu-check`` on a 1-GPU host).

Every example asks for 2 or 4 GPUs; a lent machine may have one. A job's
``gpus: N`` becomes ``gpus: V`` with ``virtual_gpus`` multiplied by N / V, as
TensorFlow splits one physical GPU into logical devices: the devices keep
their names (``/job:localhost/replica:0/task:0/device:GPU:3``), so placement,
the graph and the values are those of the original spec; only the CUDA
ordinal behind each name changes. A job whose count V does not divide is left
alone (its run is then skipped for want of GPUs, with the count said).

    python benchmarks/fold_gpus.py SOURCE_DIR DEST_DIR VISIBLE

copies SOURCE_DIR (the examples, with their data) to DEST_DIR and folds every
``*.yaml`` in it; the files lose their comments, nothing else.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import yaml


def fold_job(job: dict[str, Any], visible: int) -> dict[str, Any]:
    gpus = job.get("gpus")
    if not isinstance(gpus, int) or isinstance(gpus, bool) or gpus <= visible or gpus % visible:
        return job
    folded = dict(job, gpus=visible, virtual_gpus=int(job.get("virtual_gpus", 1)) * (gpus // visible))
    return folded


def fold_spec(text: str, visible: int) -> str:
    """The spec's YAML with every job's GPUs folded onto ``visible`` physical ones."""
    spec = yaml.safe_load(text)
    jobs = (spec.get("cluster") or {}).get("jobs") or {}
    spec["cluster"]["jobs"] = {name: fold_job(job, visible) if isinstance(job, dict) else job
                               for name, job in jobs.items()}
    return yaml.safe_dump(spec, sort_keys=False)


def fold_tree(source: Path, dest: Path, visible: int) -> list[Path]:
    shutil.copytree(source, dest, dirs_exist_ok=True)
    folded = []
    for path in sorted(dest.glob("*.yaml")):
        new = fold_spec(path.read_text(), visible)
        if yaml.safe_load(new) != yaml.safe_load(path.read_text()):
            path.write_text(new)
            folded.append(path)
    return folded


def main(argv: list[str]) -> int:
    if len(argv) != 3 or not argv[2].isdigit() or int(argv[2]) < 1:
        print(__doc__.split("\n\n")[-2], file=sys.stderr)
        return 2
    for path in fold_tree(Path(argv[0]), Path(argv[1]), int(argv[2])):
        print(f"folded onto {argv[2]} GPU(s): {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
