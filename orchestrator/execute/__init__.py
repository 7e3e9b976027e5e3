"""Execution: clusters, device backends, the worker runtime and the runner.

``compile`` (a sibling stage) turns a plan into a Dask graph; this package
starts or connects to a cluster, runs that graph there, checks where every op
ran and writes the outputs. It is the only place ``distributed`` and ``cupy``
are imported, lazily.
"""
