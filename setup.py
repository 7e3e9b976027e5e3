"""Package discovery: every ``orchestrator*`` package, and ``schemas/`` as ``orchestrator.schemas``.

The published schemas (the spec's, the run report's) are kept once, in
``schemas/`` (where editors, CI and the docs point); the wheel ships those
same files inside the package, so that ``orchestrate schema``, validation and
``orchestrate report`` read them from an installed copy.
Everything else about the project is in ``pyproject.toml``.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["orchestrator", "orchestrator.*"]), "orchestrator.schemas"],
    package_dir={"orchestrator.schemas": "schemas"},
    package_data={"orchestrator.schemas": ["*.json"]},
)
