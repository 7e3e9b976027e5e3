"""The page's words for devices, durations, sizes and op timings, shared by its figures and its tables."""

from __future__ import annotations

from ...devices import DeviceSpec
from ...errors import DeviceSpecError, format_bytes
from .view import DeviceView, OpView

HOST_NOT_MEASURED = "not measured (host memory is Dask's)"

# The page's colours. Colour-blind-safe, distinct at a glance (Okabe-Ito, then Tableau's lighter tones).
KIND_COLOURS = ("#56b4e9", "#e69f00", "#009e73", "#f0e442", "#0072b2", "#d55e00", "#cc79a7", "#999999",
                "#8cd17d", "#b6992d", "#f1ce63", "#86bcb6", "#e15759", "#ff9d9a", "#bab0ac", "#d37295")
TRANSFER_COLOUR = "#7b3294"
PLANNED_COLOUR = "#4c78a8"
SEEN_COLOUR = "#f58518"
LIMIT_COLOUR = "#c0392b"


def short_device(device: str) -> str:
    """``/job:worker/replica:0/task:0/device:GPU:1`` as ``/job:worker/task:0/GPU:1`` (replica only when not 0)."""
    try:
        spec = DeviceSpec.parse(device)
    except DeviceSpecError:  # not a device (a report of another tool's): as written
        return device
    parts = [f"job:{spec.job}" if spec.job else "", f"replica:{spec.replica}" if spec.replica else "",
             "" if spec.task is None else f"task:{spec.task}", spec.short()]
    return "/" + "/".join(p for p in parts if p)


def seconds(value: float) -> str:
    """A duration in the unit that reads best: ``70 µs``, ``12.3 ms``, ``6.81 s``."""
    if value < 1e-3:
        return f"{value * 1e6:.0f} µs"
    if value < 1.0:
        return f"{value * 1e3:.1f} ms"
    return f"{value:.2f} s"


def plural(n: int, noun: str) -> str:
    """``1 op``, ``2 ops``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def size_or_unknown(n: int | None) -> str:
    """A size in bytes as words; ``unknown`` where the report has none."""
    return "unknown" if n is None else format_bytes(n)


def op_timing(op: OpView, origin: float) -> str:
    """The op's timing in words; a loop op says that its time is summed over its runs."""
    if op.start is None:
        return op.note or "no timing recorded"
    at = f"+{seconds(op.start - origin)}"
    took = seconds(op.duration or 0.0)
    if op.looped and op.runs:
        each = seconds((op.duration or 0.0) / op.runs)
        return (f"{op.runs} runs, {took} in all ({each} each on average), first at {at}; "
                f"the bar is their summed time drawn from the first run, not when they ran")
    return f"{took} from {at}"


def peak_label(d: DeviceView, what: str, value: int | None) -> str:
    """A device's peak in words: planned, seen, or why it is unknown."""
    if value is not None:
        return f"{what} {format_bytes(value)}"
    if what == "seen":
        return HOST_NOT_MEASURED if d.backend == "host" else "not measured"
    return "planned peak unknown"


def round_bytes(n: int) -> str:
    """An axis tick in binary units without a needless decimal: ``32 KiB``, ``1 GiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:g} {unit}"
        n //= 1024
    raise AssertionError("unreachable")
