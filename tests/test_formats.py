"""File formats: one registry for load, save and outputs; a new format is one entry."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path
from typing import IO, Any

import numpy as np
import pytest

from orchestrator import formats, run_file
from orchestrator.api import check_file


def test_formats_are_chosen_by_name_or_suffix() -> None:
    assert formats.chosen("x.csv").name == "csv"  # type: ignore[union-attr]
    assert formats.chosen("x.CSV").name == "csv"  # type: ignore[union-attr]
    assert formats.chosen("x.bin", "npy").name == "npy"  # type: ignore[union-attr]
    assert formats.chosen("x.bin") is None
    assert formats.suffixes() == (".npy", ".npz", ".csv")
    assert formats.suffixes(lambda f: f.read is not None) == (".npy", ".csv")


def test_round_trips_through_every_readable_format(tmp_path: Path) -> None:
    value = np.arange(6.0).reshape(2, 3)
    for name in ("npy", "csv"):
        path = tmp_path / f"x.{name}"
        with open(path, "wb") as handle:
            formats.write_array(handle, str(path), value)
        np.testing.assert_array_equal(formats.read_array(str(path), {}), value)


def test_a_format_refuses_more_dimensions_than_it_holds() -> None:
    with pytest.raises(ValueError, match="at most 2 dimensions"):
        formats.write_array(io.BytesIO(), "x.csv", np.zeros((2, 2, 2)))


def _write_tsv(handle: IO[bytes], value: np.ndarray) -> None:
    np.savetxt(handle, np.atleast_1d(value), delimiter="\t")


def _read_tsv(path: str, params: Any) -> np.ndarray:
    return np.loadtxt(path, delimiter="\t", ndmin=1)


@pytest.mark.cluster
def test_a_new_format_is_one_registry_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Validation accepts its suffix and the run writes outputs with it: nothing else to change."""
    monkeypatch.setattr(formats, "FORMATS", {**formats.FORMATS,
                                             "tsv": formats.FileFormat("tsv", (".tsv",), _read_tsv, _write_tsv)})
    spec = tmp_path / "tsv.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        graph:
          - {name: a, op: ones, shape: [2, 3]}
        outputs:
          a: a.tsv
        """))
    assert not check_file(spec).errors
    run_file(spec, output_dir=str(tmp_path), echo=lambda _: None)
    assert (tmp_path / "a.tsv").read_text().splitlines()[0].count("\t") == 2
