"""The record an op is registered with, and what its kernel may ask of the worker."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from .values import ValueInfo

Params = Mapping[str, Any]


class KernelError(Exception):
    """A kernel found its inputs or its result unusable; the message says why, for the user.

    The runtime reports it as the op's failure on its device, without the
    exception's type: the message is the whole story.
    """
Infer = Callable[[Params, Sequence[ValueInfo]], tuple[ValueInfo, ...]]

CPU_GPU = frozenset({"CPU", "GPU"})
CPU_ONLY = frozenset({"CPU"})
COMMON_KEYS = frozenset({"name", "op", "inputs", "device", "after", "tags", "retries", "timeout", "description",
                         "cache"})


class KernelContext(Protocol):
    """What a kernel may ask of the worker running it (``orchestrator.runtime`` provides it)."""

    xp: Any  # numpy, or cupy on a CUDA GPU
    name: str  # the op's name (copies of constructs: towers/1/x)
    device: str  # the canonical name of the device it runs on
    step: int  # the loop step (0 outside loops)
    base_dir: str  # the spec's directory: relative input paths and user modules are found there
    input_keys: tuple[str, ...] | None  # parameter names when the inputs were written as a mapping
    outputs: int  # how many values the op returns
    stream: tuple[int, ...]  # the copy of each replicate and sweep around the op: each copy its own random stream
    # the inputs are this device's arrays already (the runtime adopted them): to_device would give each back as
    # it is, a tuple aside
    on_device: bool
    # the kernel's own: what it worked out once from the params, kept across the steps of one op on one device
    # (None at first; a kernel may find it None again at any step, and works it out again)
    memo: Any

    def to_host(self, value: Any) -> Any: ...
    def to_device(self, value: Any) -> Any: ...
    def user_function(self, fn: str) -> Callable[..., Any]: ...
    # the spec's folder as the process's working directory while user code runs (relative paths mean it)
    def working_directory(self) -> AbstractContextManager[None]: ...
    def stage(self, path: str) -> str: ...  # where to write ``path`` until the run succeeds (then it is renamed)


Kernel = Callable[..., Any]  # (ctx: KernelContext, params, *inputs) -> array | tuple of arrays


@dataclass(frozen=True)
class OpDef:
    name: str
    tf_name: str  # the name TF's placement log shows
    kernels: frozenset[str]
    min_inputs: int
    max_inputs: int | None
    infer: Infer
    kernel: Kernel
    required: frozenset[str] = frozenset()
    optional: frozenset[str] = frozenset()
    input_names: tuple[str, ...] = ()
    internal: bool = False  # made by constructs, not written by users
    description: str = ""
    reads: tuple[str, ...] = ()  # parameters naming files read (relative to the spec's directory)
    writes: tuple[str, ...] = ()  # parameters naming files written (relative to the output directory)
    user_code: bool = False  # runs a user function (imported on the worker, never by validate or plan)
    outputs_param: str | None = None  # the parameter that says how many values it returns (split: num)

    @property
    def params(self) -> frozenset[str]:
        return self.required | self.optional

    def output_count(self, params: Params) -> int:
        """How many values an op with these parameters returns."""
        if self.outputs_param is None:
            return 1
        return int(params.get(self.outputs_param, 1))

    @property
    def needs_base_dir(self) -> bool:
        """Does the kernel resolve anything against the spec's directory?"""
        return bool(self.reads) or self.user_code
