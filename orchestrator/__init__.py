"""orchestrator: declarative job specs for GPU and CPU compute on Dask.

The stages, each a package of its own (docs/architecture.md)::

    spec -> plan -> compile -> execute (client) -> runtime (workers) -> report

The Python API lives in :mod:`orchestrator.api`. Its names are also here,
imported on first use: ``orchestrate`` imports this package before it can
handle a Ctrl-C, so the package itself imports nothing heavy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import Checked, check_file, plan_file, run_file
    from .devices import DeviceSpec

__all__ = ["Checked", "DeviceSpec", "check_file", "plan_file", "run_file"]
__version__ = "0.1.0"

_HOMES = {"Checked": "api", "check_file": "api", "plan_file": "api", "run_file": "api", "DeviceSpec": "devices"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'orchestrator' has no attribute '{name}'")
    return getattr(importlib.import_module(f".{home}", __name__), name)
