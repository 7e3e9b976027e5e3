"""The published JSON Schemas, shipped in the wheel as ``orchestrator.schemas``.

``spec.schema.json`` (the spec language) and ``run-report.schema.json`` (the
run report that ``run --report`` writes) are kept once, here, where editors
(``yaml-language-server``) and CI read them; ``setup.py`` maps this directory
into the package so that an installed ``orchestrate`` reads the very same
files (through :mod:`orchestrator.jsonschemas`).
"""
