"""The plan without some devices: which devices a re-plan takes out, and whether it could be made.

A run whose device worker is lost for good has one way on: place the spec
again on the devices still there (``run.on_device_lost: replan``).
``orchestrate plan SPEC --without DEVICE`` shows that plan before any run.
The re-plan is not a patch of the old plan: the spec is checked again on the
cluster less those devices (``Cluster.without``; ``spec.validate`` takes
them), so every decision is made by the stage that makes it. Patterns
(``/gpu:*``, a ``replicate`` over ``/job:worker/gpu:*``) match only the
devices left and shrink; a sweep's copies on a lost device move to the
devices of its ``spread`` left, in turn, and the others stay where they were
(``Expander.spread``); an op pinned to a lost device is a placement error
naming it, unless soft placement moves it (``plan.place``); the memory plan
then says what no longer fits. What changed is the plan diff of the full
plan and the re-plan (``plan.diff``).

This module holds the part that is only the re-plan's: reading the devices
the user names (a device string, or a pattern for several: a whole task),
against the full cluster. No state.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..devices import DeviceSpec
from ..errors import DeviceSpecError, UsageError, did_you_mean
from ..spec.records import Cluster

PLACEMENT_CODES = ("placement", "no-kernel")  # errors that leave a re-plan without a placement to compare


def lost_devices(cluster: Cluster, texts: Sequence[str], flag: str = "--without") -> tuple[str, ...]:
    """The canonical names of the devices ``texts`` name (each a device or a pattern), in cluster order.

    Raises :class:`UsageError` for a string that is not a device, or names none of the cluster's, with the
    closest device's name; and when nothing would be left.
    """
    names = [d.name for d in cluster.devices]
    chosen: set[str] = set()
    for text in texts:
        try:
            pattern = DeviceSpec.parse(text)
        except DeviceSpecError as exc:
            raise UsageError(f"orchestrate plan: {flag} {text}: {exc}") from None
        found = cluster.matching(pattern)
        if not found:
            hint = did_you_mean(text, names) or did_you_mean(pattern.to_string(), names) or \
                f"the devices are {', '.join(names[:8])}{', ...' if len(names) > 8 else ''}"
            raise UsageError(f"orchestrate plan: {flag} {text}: the cluster has no such device ({hint})")
        chosen.update(d.name for d in found)
    if len(chosen) == len(names):
        raise UsageError(f"orchestrate plan: {flag}: no device would be left to plan on")
    return tuple(name for name in names if name in chosen)
