"""orchestrator: declarative job specs for GPU and CPU compute on Dask.

The stages (DESIGN §2)::

    load -> validate -> place -> memory -> compile -> execute -> report

The Python API lives in :mod:`orchestrator.api`.
"""

from .api import Checked, check_file, plan_file, run_file, validate_file
from .devices import DeviceSpec

__all__ = ["Checked", "DeviceSpec", "check_file", "plan_file", "run_file", "validate_file"]
__version__ = "0.1.0"
