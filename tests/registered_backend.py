"""A GPU backend that lives outside the package: tests/test_backends.py registers it with one registry entry.

Its workers import it by the path the client's registry gives (``registered_backend:TracingBackend``).
"""

from __future__ import annotations

from orchestrator.runtime.backends.simulated import SimulatedGPUBackend


class TracingBackend(SimulatedGPUBackend):
    """The simulated GPU under a name of its own: the run report shows which backend each worker ran."""

    name = "tracing"
