"""``python -m orchestrator``: the ``orchestrate`` command."""

from .cli import main

main()
