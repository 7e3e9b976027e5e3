"""Stage 1, file -> Spec: read a spec file and check it, never running anything.

:mod:`.load` reads the YAML (positions kept for every diagnostic), :mod:`.params`
substitutes the spec's parameters, :mod:`.constructs` expands ``scope``,
``replicate``, ``sweep`` and ``iterate`` into plain ops, and :mod:`.validate`
checks everything and makes the :class:`~orchestrator.spec.records.Spec`.
Its records (:mod:`.records`) are what every later stage reads. Nothing here
imports user code or starts a cluster: ``orchestrate validate`` runs this stage
and the next.
"""
