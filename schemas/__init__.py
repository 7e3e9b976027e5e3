"""The spec language's JSON Schema, shipped in the wheel as ``orchestrator.schemas``.

``spec.schema.json`` is kept once, here, where editors (``yaml-language-server``)
and CI read it; ``setup.py`` maps this directory into the package so that an
installed ``orchestrate`` reads the very same file.
"""
