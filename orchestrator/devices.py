"""Device strings and specs, after TensorFlow's ``tf.DeviceSpec``.

Grammar: ``/job:NAME/replica:N/task:N/device:TYPE:N``. Every field is optional,
the leading ``/`` too; ``/cpu:0`` and ``/gpu:1`` are short for
``/device:CPU:0`` and ``/device:GPU:1``. The type is case-insensitive, in
strings and in the constructor alike (``DeviceSpec(device_type="gpu")``, as
TF accepts it; stored upper case, ``CPU`` or ``GPU``); the index is an
integer, ``*`` (:data:`ANY`) or absent (``/device:GPU``). ``""`` sets nothing.

Merging follows nested ``tf.device`` scopes, field by field as TF's
``DeviceSpecV2.make_merged_spec``: ``outer.merge(inner)`` keeps ``outer``'s
fields except those ``inner`` sets. The type and the index are separate
fields: ``/gpu:1`` then ``/cpu`` gives ``/device:CPU:1``, the outer index
carried over to the new type, exactly as TF does (a task has only ``CPU:0``,
so the placer then reports ``CPU:1`` missing, or soft placement falls back).
One deliberate difference: TF parses ``*`` as "no index", so in TF
``/gpu:1`` then ``/gpu:*`` stays ``GPU:1``; here ``*`` is an index of its own
(any GPU, Dask chooses at run time) and, like any index an inner string sets,
it wins: ``GPU:*``. To inherit the outer index, leave the index out
(``/gpu``). Since every field is taken from the innermost spec that sets it,
``merge`` is associative.

Physical GPUs (:data:`GpuId`) are named as ``CUDA_VISIBLE_DEVICES`` names
them: CUDA ordinals, or the GPU and MIG UUIDs ``nvidia-smi -L`` prints, never
both in one list (:func:`parse_gpu_ids`, :func:`gpu_id_problem`).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final, Literal, NoReturn, Sequence

from .errors import DeviceSpecError

__all__ = ["ANY", "GPU_UUID_PATTERN", "SOFT_KEEPS", "DeviceIndex", "DeviceSpec", "GpuId", "canonical_device",
           "gpu_id_problem", "gpu_mix_problem", "parse_gpu_ids"]

ANY: Final = "*"
SOFT_KEEPS: Final = "soft placement relaxes only the device type and index, never the job, replica or task, as in TF"
"""TF's soft placement keeps the job, replica and task it was asked for (``Member::GetSoftDeviceName``):
the hint of every error about a missing one says so when ``placement.soft`` is on."""
DeviceIndex = int | Literal["*"]

_TYPES: Final = ("CPU", "GPU")
_FIELDS: Final = ("job", "replica", "task", "device_type", "device_index")
_JOB_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# Real TensorFlow types we do not run: naming them beats "unknown field 'tpu'".
_FOREIGN_TYPES: Final = frozenset({"TPU", "TPU_SYSTEM", "XLA_CPU", "XLA_GPU", "XLA_TPU_JIT"})


def _is_count(value: object) -> bool:
    return type(value) is int and value >= 0  # bool is not a count


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A possibly partial device name; unset fields are ``None``.

    ``device_type`` may be given in any case and is stored upper case (TF's
    ``DeviceSpec(device_type="gpu")`` is ``GPU`` too); ``device_index`` is an
    integer or ``"*"`` and needs a type.
    """

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: DeviceIndex | None = None
    # the canonical string, rendered on first use: planners ask for it 100k times
    _text: str | None = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        kind = self.device_type
        if isinstance(kind, str) and kind != kind.upper() and kind.upper() in _TYPES:
            object.__setattr__(self, "device_type", kind.upper())  # TF: DeviceSpec(device_type="gpu") is GPU
        if self.job is not None and not (type(self.job) is str and _JOB_RE.fullmatch(self.job)):
            _invalid(f"job must match {_JOB_RE.pattern}, got {self.job!r}")
        if self.replica is not None and not _is_count(self.replica):
            _invalid(f"replica must be a non-negative integer, got {self.replica!r}")
        if self.task is not None and not _is_count(self.task):
            _invalid(f"task must be a non-negative integer, got {self.task!r}")
        if self.device_type is not None and self.device_type not in _TYPES:
            _invalid(f"device_type must be 'CPU' or 'GPU', got {self.device_type!r}")
        if self.device_index is not None:
            if self.device_index != ANY and not _is_count(self.device_index):
                _invalid(f"device_index must be a non-negative integer or '*', got {self.device_index!r}")
            if self.device_type is None:  # the grammar cannot write an index without a type
                _invalid("device_index needs a device_type")

    def __repr__(self) -> str:
        return f"DeviceSpec({self.to_string()!r})"

    @classmethod
    def parse(cls, text: str) -> DeviceSpec:
        """Parse a device string; raises :class:`DeviceSpecError` quoting it."""
        if not isinstance(text, str):
            raise DeviceSpecError(f"device must be a string, got {type(text).__name__}")
        return _parse(text.strip())

    def to_string(self) -> str:
        """Canonical long form of the set fields: ``/job:ps/task:1/device:GPU:0``."""
        text = self._text
        if text is None:
            text = _render(self)
            object.__setattr__(self, "_text", text)
        return text

    __str__ = to_string

    def merge(self, inner: DeviceSpec) -> DeviceSpec:
        """``self`` as an outer scope, ``inner`` nested in it: each field ``inner`` sets wins.

        Field by field, as TF's ``make_merged_spec``: a type without an index
        keeps the outer index, even when the type changes (``/gpu:1`` then
        ``/cpu`` is ``/device:CPU:1``), and an index of ``*`` is set like any other.
        """
        return DeviceSpec(
            inner.job if inner.job is not None else self.job,
            inner.replica if inner.replica is not None else self.replica,
            inner.task if inner.task is not None else self.task,
            inner.device_type if inner.device_type is not None else self.device_type,
            inner.device_index if inner.device_index is not None else self.device_index,
        )

    def fill(self, defaults: DeviceSpec) -> DeviceSpec:
        """Take the fields ``self`` leaves unset from ``defaults`` (``defaults.merge(self)``)."""
        return defaults.merge(self)

    def replace(self, **fields: object) -> DeviceSpec:
        unknown = sorted(set(fields) - set(_FIELDS))
        if unknown:
            raise DeviceSpecError(f"unknown DeviceSpec field {unknown[0]!r} (expected {', '.join(_FIELDS)})")
        return dataclasses.replace(self, **fields)  # type: ignore[arg-type]

    def set_fields(self) -> tuple[str, ...]:
        return tuple(name for name in _FIELDS if getattr(self, name) is not None)

    def unset_fields(self) -> tuple[str, ...]:
        return tuple(name for name in _FIELDS if getattr(self, name) is None)

    @property
    def is_empty(self) -> bool:
        return self == _EMPTY

    @property
    def is_complete(self) -> bool:
        return not self.unset_fields()

    @property
    def is_any_index(self) -> bool:
        return self.device_index == ANY

    def matches(self, device: DeviceSpec) -> bool:
        """``self`` as a pattern: every field it sets is set equal in ``device``."""
        for name in _FIELDS:
            want = getattr(self, name)
            if want is None:
                continue
            have = getattr(device, name)
            if have is None or (want != have and not (name == "device_index" and want == ANY)):
                return False
        return True

    def task_spec(self) -> DeviceSpec:
        return DeviceSpec(self.job, self.replica, self.task)

    def short(self) -> str:
        """``GPU:0``, ``CPU:*``, ``GPU`` (no index) or ``""`` (no type)."""
        if self.device_type is None:
            return ""
        if self.device_index is None:
            return self.device_type
        return f"{self.device_type}:{self.device_index}"


_EMPTY: Final = DeviceSpec()


def canonical_device(
    job: str, task: int, device_type: str, index: DeviceIndex, replica: int = 0
) -> DeviceSpec:
    """A complete spec from parts, without parsing; the type may be any case."""
    kind = device_type.upper() if isinstance(device_type, str) else device_type
    return DeviceSpec(job, replica, task, kind, index)


def _invalid(reason: str) -> NoReturn:
    raise DeviceSpecError(f"invalid DeviceSpec: {reason}")


@lru_cache(maxsize=4096)  # specs with 100k ops repeat a handful of strings
def _parse(text: str) -> DeviceSpec:
    def fail(reason: str) -> DeviceSpecError:
        return DeviceSpecError(f"invalid device string '{text}': {reason}")

    def count(name: str, value: str, extra: str = "") -> int:
        if not (value.isascii() and value.isdigit()):
            raise fail(f"{name} must be a non-negative integer{extra}")
        return int(value)

    if not text:
        return _EMPTY
    found: dict[str, object] = {}
    for part in text.removeprefix("/").split("/"):
        if not part:
            raise fail("empty field (stray '/')")
        key, *values = part.split(":")
        name = key.lower()
        if name in ("job", "replica", "task"):
            if len(values) != 1:
                raise fail(f"expected {name}:{'NAME' if name == 'job' else 'N'}")
            if name in found:
                raise fail(f"field '{name}' given more than once")
            if name != "job":
                found[name] = count(name, values[0])
            elif not values[0]:
                raise fail("job name must not be empty")
            elif not _JOB_RE.fullmatch(values[0]):
                raise fail(f"job name '{values[0]}' must match {_JOB_RE.pattern}")
            else:
                found[name] = values[0]
            continue
        if name == "device":
            if not 1 <= len(values) <= 2:
                raise fail("expected device:TYPE or device:TYPE:N")
            kind, values = values[0].upper(), values[1:]
        elif key.upper() in _TYPES or key.upper() in _FOREIGN_TYPES:
            if len(values) > 1:
                raise fail(f"expected {key} or {key}:N")
            kind = key.upper()
        else:
            raise fail(f"unknown field '{key}' (expected job, replica, task, device, cpu or gpu)")
        if not kind:
            raise fail("device type must not be empty (expected CPU or GPU)")
        if kind not in _TYPES:
            raise fail(f"unknown device type '{kind}' (expected CPU or GPU)")
        if "device_type" in found:
            if found["device_type"] != kind:
                raise fail(f"more than one device type ({found['device_type']} and {kind})")
            raise fail("field 'device' given more than once")
        found["device_type"] = kind
        if values:
            found["device_index"] = ANY if values[0] == ANY else count("device index", values[0], " or '*'")
    return DeviceSpec(**found)  # type: ignore[arg-type]


def _render(spec: DeviceSpec) -> str:
    out = ""
    if spec.job is not None:
        out += f"/job:{spec.job}"
    if spec.replica is not None:
        out += f"/replica:{spec.replica}"
    if spec.task is not None:
        out += f"/task:{spec.task}"
    if spec.device_type is not None:
        out += f"/device:{spec.short()}"
    return out


# --------------------------------------------------------------------------- physical GPUs

GpuId = int | str
"""A physical GPU as ``CUDA_VISIBLE_DEVICES`` names it: a CUDA ordinal, or a GPU or MIG UUID."""

_UUID: Final = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
GPU_UUID_PATTERN: Final = f"^(GPU-{_UUID}|MIG-{_UUID}|MIG-GPU-{_UUID}/[0-9]+/[0-9]+)$"
"""The UUIDs ``nvidia-smi -L`` prints: a GPU, a MIG slice, and a MIG slice as drivers before R470 name it
(``MIG-GPU-<uuid>/<GPU instance>/<compute instance>``). The schema's ``visible_gpus`` items use this pattern."""
_GPU_UUID: Final = re.compile(GPU_UUID_PATTERN[1:-1])  # for fullmatch: '$' would let a trailing newline through
_UUID_EXAMPLES: Final = ("GPU-8932f937-d72c-4106-c12f-20bd9faed9f6 or MIG-8932f937-d72c-4106-c12f-20bd9faed9f6 "
                         "(MIG-GPU-8932f937-d72c-4106-c12f-20bd9faed9f6/1/0 on drivers before R470)")


def gpu_id_problem(text: str) -> tuple[str, str] | None:
    """Why ``text`` is not a GPU UUID (message, hint); None when it is one."""
    if _GPU_UUID.fullmatch(text):
        return None
    stripped = text.strip()
    if re.fullmatch(r"[0-9]+", stripped):
        return f"{text!r} is text, not a CUDA ordinal", f"write {stripped} without quotes"
    upper = stripped.upper()
    prefix = next((p for p in ("MIG-GPU-", "GPU-", "MIG-") if upper.startswith(p)), None)
    if prefix is None:
        return (f"{text!r} is not a GPU",
                f"give CUDA ordinals (0, 1, ...) or GPU UUIDs as nvidia-smi -L prints them, e.g. {_UUID_EXAMPLES}")
    fixed = prefix + stripped[len(prefix):].lower()
    if _GPU_UUID.fullmatch(fixed):
        at = len(prefix)
        how = [what for what, wrong in (("without white space around it", stripped != text),
                                        ("the prefix in capitals", stripped[:at] != prefix),
                                        ("the hex digits in lower case", stripped[at:] != fixed[at:])) if wrong]
        return f"{text!r} is not a GPU UUID as nvidia-smi -L prints it", f"write {fixed}: {', '.join(how)}"
    # CUDA also takes a unique prefix of a UUID; whether it is unique can only be known on the machine,
    # and a prefix two GPUs share fails there, in every worker at once
    return (f"{text!r} is not a whole GPU UUID",
            f"write the UUID in full, as nvidia-smi -L prints it: e.g. {_UUID_EXAMPLES}")


def gpu_mix_problem(gpus: Sequence[GpuId]) -> tuple[int, str, str] | None:
    """A list mixing CUDA ordinals and UUIDs: (index of the first item unlike the first, message, hint)."""
    kinds = [isinstance(g, str) for g in gpus]
    odd = next((i for i, kind in enumerate(kinds) if kind != kinds[0]), None)
    if odd is None:
        return None
    first, other = gpus[0], gpus[odd]
    return (odd, f"{_gpu_text(first)} and {_gpu_text(other)} in one list: CUDA ordinals and UUIDs do not mix",
            "give every GPU as an ordinal or every GPU as a UUID (nvidia-smi -L prints both): an ordinal depends "
            "on the machine's CUDA device order and a UUID does not, so a mix could name one GPU twice")


def parse_gpu_ids(text: str) -> tuple[GpuId, ...]:
    """A comma-separated list as ``CUDA_VISIBLE_DEVICES`` holds it (``0,1`` or UUIDs); ValueError says what is wrong."""
    gpus: list[GpuId] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if re.fullmatch(r"-?[0-9]+", part):
            if part.startswith("-"):
                raise ValueError(f"GPU indices must be non-negative, got '{text}'")
            gpus.append(int(part))
            continue
        problem = gpu_id_problem(part)
        if problem is not None:
            raise ValueError(f"expected GPU indices like 0,1 or GPU UUIDs, got '{text}': {problem[0]} ({problem[1]})")
        gpus.append(part)
    mixed = gpu_mix_problem(gpus)
    if mixed is not None:
        raise ValueError(f"{mixed[1]} ({mixed[2]})")
    return tuple(gpus)


def _gpu_text(gpu: GpuId) -> str:
    return f"UUID {gpu!r}" if isinstance(gpu, str) else f"ordinal {gpu}"
