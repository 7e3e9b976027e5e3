"""``python -m orchestrator``: the ``orchestrate`` command."""

from .entry import main

main()
