"""The CuPy backend: arrays on the worker's own CUDA GPU. The only module importing cupy.

Each GPU worker sees its physical GPU first (``CUDA_VISIBLE_DEVICES`` is set
per worker, as dask-cuda does), so device 0 is "our" GPU. A worker standing
for every device of a task (``processes: host``) drives all its GPUs, as a
TensorFlow worker does: each backend holds its GPU's CUDA ordinal in the
process (``DeviceConfig.ordinal``) and makes it CuPy's current device on the
calling thread before anything it does (:meth:`CupyBackend.use`: CuPy's
current device is per thread, and a Dask thread runs ops of every device of
the process; ``runtime.device`` calls it in an op's own timeout thread too),
so arrays, pools and caps stay per GPU. The cap of a
logical GPU is the CuPy memory pool's limit, or an RMM pool with a maximum
when RMM is installed; an allocation beyond it raises CuPy's
``OutOfMemoryError``, which we turn into :class:`DeviceOutOfMemory` naming
the device and the op. Host↔device copies are explicit: inputs arrive as
host or device arrays and ``to_device`` moves them with ``cupy.asarray``;
outputs leave through ``to_host`` (``cupy.asnumpy``).
"""

from __future__ import annotations

from typing import Any

from ...errors import DeviceOutOfMemory
from .base import DeviceConfig


def cuda_device_count() -> int:
    """How many CUDA GPUs this process can see (0 when CuPy or CUDA is missing)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no cupy, no driver, no device: all mean "no CUDA here"
        return 0


class CupyBackend:
    name = "cupy"
    keeps_adopted = True

    def __init__(self, config: DeviceConfig):
        import cupy

        self.config = config
        self.xp = cupy
        self._oom = cupy.cuda.memory.OutOfMemoryError
        self.device = cupy.cuda.Device(config.ordinal)
        self.device.use()
        self.pool = self._make_pool(cupy, config)
        if config.reserve_at_start and config.memory_limit:
            # TF's default without allow_growth: take the whole cap up front and keep it in the pool
            block = self.pool.malloc(config.memory_limit)
            del block

    def _make_pool(self, cupy: Any, config: DeviceConfig) -> Any:
        try:
            import rmm
            from rmm.allocators.cupy import rmm_cupy_allocator

            rmm.reinitialize(pool_allocator=True, maximum_pool_size=config.memory_limit, devices=config.ordinal)
            cupy.cuda.set_allocator(rmm_cupy_allocator)
            return cupy.get_default_memory_pool()
        except ImportError:
            pool = cupy.get_default_memory_pool()
            if config.memory_limit:
                pool.set_limit(size=config.memory_limit)
            return pool

    def use(self) -> None:
        """Make this GPU CuPy's current device on the calling thread (a thread may run ops of several GPUs)."""
        self.device.use()

    def _guard(self, op: str, nbytes: int, fn: Any, *args: Any) -> Any:
        self.device.use()
        try:
            return fn(*args)
        except self._oom:
            raise DeviceOutOfMemory(self.config.name, op, nbytes, int(self.pool.used_bytes()),
                                    int(self.config.memory_limit or self.pool.get_limit())) from None

    def to_device(self, value: Any, op: str) -> Any:
        if isinstance(value, tuple):
            return tuple(self.to_device(v, op) for v in value)
        return self._guard(op, int(getattr(value, "nbytes", 0)), self.xp.asarray, value)

    def to_host(self, value: Any) -> Any:
        if isinstance(value, tuple):
            return tuple(self.to_host(v) for v in value)
        self.device.use()
        return self.xp.asnumpy(value)

    def adopt(self, value: Any, op: str) -> Any:
        return self.to_device(value, op)

    def execute(self, op: str, fn: Any) -> Any:
        return self.to_device(self._guard(op, 0, fn), op)

    def stats(self) -> dict[str, int | str | None]:
        self.device.use()  # the pool's counts are the current device's
        return {"backend": self.name, "in_use": int(self.pool.used_bytes()),
                "peak": int(self.pool.total_bytes()), "limit": self.config.memory_limit}
