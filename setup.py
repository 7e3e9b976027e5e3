"""Package discovery: every ``orchestrator*`` package, and ``schemas/`` as ``orchestrator.schemas``.

The spec schema is kept once, in ``schemas/`` (where editors, CI and the
docs point); the wheel ships that same file inside the package, so that
``orchestrate schema`` and validation read it from an installed copy.
Everything else about the project is in ``pyproject.toml``.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["orchestrator", "orchestrator.*"]), "orchestrator.schemas"],
    package_dir={"orchestrator.schemas": "schemas"},
    package_data={"orchestrator.schemas": ["*.json"]},
)
