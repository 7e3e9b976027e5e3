"""The runner: execute a plan on a Dask cluster and check that it ran as planned.

Policy. The plan is law: every op is pinned by identity resources to the
worker standing for its device, and after the run the worker each op really
ran on (reported by the op itself, from inside that worker) is compared with
the plan; any difference fails the run. Nothing is written until every
output has been computed: outputs go to temporary files beside their targets
and are renamed into place only when all of them are ready, so a failed run
leaves earlier files untouched.

State. The runner owns, for one run: the cluster it started (or the client
it connected), a run token that makes this run's keys and events unique, the
futures of the requested values, and the events workers logged. It keeps
nothing between runs; ``--keep-alive`` only leaves the cluster up.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from ..atomic import atomic_open
from ..compile import CompiledGraph, compile_plan
from ..devices import DeviceSpec
from ..errors import NoWorkerError, OrchestratorError, PlacementMismatch, RunError
from ..keys import choose_task_names
from ..model import Plan
from ..perf import paused_gc
from .cluster import EmbeddedCluster, dask_settings, device_configs, device_resource, scheduler_config
from .runtime import LOG_TOPIC, DeviceRuntimePlugin, drain_records

Echo = Callable[[str], None]


@dataclass(frozen=True)
class RunSettings:
    """How to run (command-line flags and API arguments; the spec gives defaults)."""

    scheduler: str | None = None  # None: the spec's cluster.scheduler ("local" by default)
    keep_alive: bool = False
    output_dir: str | None = None
    report_path: str | None = None
    performance_report: str | None = None
    progress: bool | None = None  # None: only on a terminal
    gpu_backend: str | None = None
    write_outputs: bool = True
    wait_for_workers: float = 30.0
    # TLS files (override the spec's cluster.tls field by field; relative to the current directory)
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    on_loop_progress: Callable[[str, int, int], None] | None = None  # (loop, steps done, steps) per window
    task_names: str = "auto"  # how Dask keys are named: auto, op or kind (see orchestrator.keys)


@dataclass(frozen=True)
class RunResult:
    name: str
    values: Mapping[str, Any]
    report: Mapping[str, Any]
    plan: Plan = field(repr=False)
    backend: str = "simulated"
    dashboard_link: str | None = None
    written: tuple[str, ...] = ()


def choose_backend(plan: Plan, requested: str, visible: Callable[[], int]) -> tuple[str, str]:
    """(backend, why). auto: cupy when the GPU workers' machines show enough CUDA GPUs, else simulated.

    ``visible`` counts the CUDA GPUs where the GPU workers run (this machine for
    the embedded cluster, the workers themselves for a remote one).
    """
    gpus = {d.physical_gpu for d in plan.spec.cluster.devices if d.is_gpu}
    if not gpus:
        return "simulated", "no GPUs in the spec"
    if requested == "simulated":
        return "simulated", "gpu_backend: simulated"
    count = visible()
    needed = max(g for g in gpus if g is not None) + 1
    if requested == "cupy":
        if count < needed:
            raise RunError(f"gpu_backend: cupy needs {needed} CUDA GPU(s); {count} visible "
                           "(install orchestrator[gpu] on a CUDA machine, or use gpu_backend: simulated)")
        return "cupy", "gpu_backend: cupy"
    if count >= needed:
        return "cupy", f"{count} CUDA GPU(s) visible"
    return "simulated", f"{count} CUDA GPU(s) visible, {needed} needed"


def _remote_cuda_count(client: Any) -> Callable[[], int]:
    """The fewest CUDA GPUs any GPU worker of a remote cluster can see (its own first)."""
    def count() -> int:
        from .cupy_backend import cuda_device_count

        gpu_workers = [addr for addr, w in client.scheduler_info(n_workers=-1)["workers"].items()
                       if "GPU" in w.get("resources", {})]
        if not gpu_workers:
            return 0
        counts = client.run(cuda_device_count, workers=gpu_workers)
        # each worker sees its task's GPUs (its own first); enough if each sees as many as the task uses
        return min(counts.values())
    return count


def resolve_output(target: str, base: str, allow_outside: bool) -> str:
    path = os.path.normpath(os.path.join(base, target))
    # realpath: a symlink inside the output directory must not lead outside it
    real_base = os.path.realpath(base)
    real_parent = os.path.realpath(os.path.dirname(path) or ".")
    inside = os.path.commonpath([real_parent, real_base]) == real_base
    if not inside and not allow_outside:
        raise RunError(f"output path '{target}' escapes the output directory {base} "
                       "(set run.allow_absolute_paths: true to allow it)")
    return path


class Runner:
    def __init__(self, plan: Plan, settings: RunSettings, echo: Echo):
        self.plan, self.settings, self.echo = plan, settings, echo
        self.spec = plan.spec
        self.token = uuid.uuid4().hex[:12]
        self.task_names, self.task_names_why = choose_task_names(plan, settings.task_names)
        self.base_dir = os.path.abspath(self.spec.document.directory)
        out_dir = settings.output_dir or self.spec.run.output_dir or "."
        self.output_dir = os.path.normpath(os.path.join(self.base_dir, out_dir))
        self.backend, self.backend_why = "simulated", ""  # chosen once connected: see run()
        self.key_owner: dict[str, str] = {}
        self.not_run: dict[str, str] = {}  # ops the driver resolved itself (loop exports), and why
        self.task_count = 0
        self.move_count = 0
        self.phases: dict[str, float] = {}  # seconds per phase of the run, for the report

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - started

    # ------------------------------------------------------------------ cluster

    def connect(self) -> tuple[Any, Any]:
        """An embedded cluster and its client, or ``(None, client)`` of the remote scheduler."""
        from distributed import Client

        from .security import scheduler_address, security_for

        s = self.settings
        security = security_for(self.spec.cluster.tls, self.base_dir, s.tls_ca_file, s.tls_cert, s.tls_key)
        address = s.scheduler or self.spec.cluster.scheduler
        if address in ("local", "", None):
            cluster = EmbeddedCluster(self.spec.cluster, self.spec.cluster.dashboard, security=security).start()
            return cluster, Client(cluster, set_as_default=False, security=security)
        address = scheduler_address(str(address), security)
        try:
            client = Client(address, set_as_default=False, timeout=s.wait_for_workers, security=security)
        except (OSError, TimeoutError) as exc:
            hint = ("check that the certificates are signed by the scheduler's CA" if security is not None
                    else "start it with 'dask scheduler', or give the right address")
            raise RunError(f"cannot connect to the Dask scheduler at {address} within {s.wait_for_workers:g} s: "
                           f"{type(exc).__name__}: {exc} ({hint})") from None
        return None, client

    def wait_for_devices(self, client: Any) -> None:
        """Every device the plan uses must be offered by a worker of that name (by identity resource).

        A pinned op needs the worker offering ``device:<name>``; an op on
        ``GPU:*`` needs some worker offering ``GPU`` and its task's resource.
        Waits up to ``wait_for_workers`` seconds, then fails naming what is
        missing and the ``orchestrate worker`` commands that would start it.
        """
        from .cluster import task_resource

        pinned = {p.device_name for p in self.plan.placements if p.device.device_index != "*"}
        anywhere = {p.device.task_spec() for p in self.plan.placements if p.device.device_index == "*"}
        deadline = time.monotonic() + self.settings.wait_for_workers
        while True:
            workers = client.scheduler_info(n_workers=-1)["workers"]
            by_resource: dict[str, list[Mapping[str, Any]]] = {}
            for addr, w in workers.items():
                for r in w.get("resources", {}):
                    by_resource.setdefault(r, []).append({**w, "address": addr})
            missing = sorted(d for d in pinned if device_resource(d) not in by_resource)
            missing += sorted(f"{t.to_string()}/device:GPU:*" for t in anywhere
                              if not any("GPU" in w.get("resources", {}) for w in by_resource.get(task_resource(t), ())))
            if not missing:
                break
            if time.monotonic() > deadline:
                tasks = sorted({(s.job, s.task) for s in (DeviceSpec.parse(m.replace("GPU:*", "GPU:0"))
                                                          for m in missing)}, key=str)
                address = self.settings.scheduler or self.spec.cluster.scheduler
                commands = "; ".join(f"orchestrate worker {self.spec.file} --job {job} --task {task} "
                                     f"--scheduler {address}" for job, task in tasks)
                raise NoWorkerError(f"no worker offers {len(missing)} device(s) the plan uses: {', '.join(missing)} "
                                    f"(waited {self.settings.wait_for_workers:g} s; start them with: {commands})")
            time.sleep(0.1)
        misnamed = sorted({f"{w.get('name')} at {w.get('address', '?')} offers {d}" for d in pinned
                           for w in by_resource[device_resource(d)] if str(w.get("name")) != d})
        if misnamed:
            raise NoWorkerError("workers must be named by the device they stand for (dask worker --name): "
                                + "; ".join(misnamed))

    # ------------------------------------------------------------------ run

    def run(self) -> RunResult:
        retries = max([op.retries for op in self.spec.ops] + [self.spec.run.retries])
        # Missing devices are caught before submission (wait_for_devices); this timeout is for a
        # worker lost mid-run. With retries, give its nanny time to bring it back under its name.
        no_workers = self.spec.run.no_workers_timeout if retries == 0 else max(self.spec.run.no_workers_timeout, 60.0)
        settings = scheduler_config(no_workers, retries)
        with dask_settings(settings):
            from .cupy_backend import cuda_device_count

            requested = self.settings.gpu_backend or self.spec.cluster.gpu_backend
            with self.phase("connect"):
                cluster, client = self.connect()
            try:
                # CUDA is counted where the GPU workers run: here for the embedded cluster, on them otherwise
                visible = cuda_device_count if cluster is not None else _remote_cuda_count(client)
                self.backend, self.backend_why = choose_backend(self.plan, requested, visible)
                link = client.dashboard_link if "dashboard" in client.scheduler_info().get("services", {}) else None
                self.echo(f"running '{self.spec.name}' on {'an embedded' if cluster else 'a remote'} Dask cluster "
                          f"({len(self.spec.cluster.devices)} devices, GPU backend: {self.backend}"
                          f"{' — simulated GPUs' if self.backend == 'simulated' and self._has_gpus() else ''}; "
                          f"{self.backend_why})")
                if link:
                    grouped = "op name" if self.task_names == "op" else "op kind"
                    self.echo(f"dashboard: {link} (task stream grouped by {grouped}: {self.task_names_why})")
                with self.phase("prepare workers"):
                    self.wait_for_devices(client)
                    runtime = DeviceRuntimePlugin(device_configs(self.spec.cluster, self.backend))
                    # Named by its content and left registered: the next run of this cluster re-registers the
                    # same name (nothing piles up on a long-lived scheduler), and a worker that joins or
                    # restarts later gets its device runtime from the scheduler without waiting for a run.
                    client.register_plugin(runtime, name=runtime.plugin_name())
                return self._run_on(client, link)
            finally:
                if self.settings.keep_alive and cluster is not None:
                    self.echo("cluster kept alive (--keep-alive); press Ctrl-C to stop it")
                    _wait_forever()
                client.close()
                if cluster is not None:
                    cluster.close()

    def _has_gpus(self) -> bool:
        return any(d.is_gpu for d in self.spec.cluster.devices)

    def _run_on(self, client: Any, link: str | None) -> RunResult:
        from distributed import performance_report

        if self.spec.placement.log:
            client.subscribe_topic(LOG_TOPIC, lambda event: self.echo(str(event[1])))
        started = time.time()
        context: Any = performance_report(filename=self.settings.performance_report) \
            if self.settings.performance_report else _nullcontext()
        with client.as_current(), context:
            if self.spec.loops:
                from .loops import run_staged

                with self.phase("compute"):  # staged: compiling and submitting happen window by window
                    values = run_staged(self, client)
            else:
                with self.phase("compile"), paused_gc():
                    compiled = compile_plan(self.plan, self.token, self.base_dir,
                                            host_outputs=self.backend == "cupy", out_dir=self.output_dir,
                                            task_names=self.task_names)
                with self.phase("submit"):
                    futures = self.submit(client, compiled, list(compiled.output_keys.values()), progress=True)
                with self.phase("compute"):
                    values = self.gather_outputs(client, compiled.output_keys, futures, compiled.sink_keys)
        elapsed = time.time() - started
        collecting = time.perf_counter()
        drained = client.run(drain_records, run=self.token)
        events = [r for worker in drained.values() for r in worker["records"]]
        stats = {addr: {"ran_on": worker["ran_on"], **worker["memory"]} for addr, worker in drained.items()}
        restarted = {worker["ran_on"] for worker in drained.values() if worker["created"] > started}
        report = self._report(events, stats, elapsed)
        received = [item for worker in drained.values() for item in worker["received"]]
        report["totals"]["bytes_moved"] = sum(n for _, n in received)
        report["totals"]["transfers_seen"] = len(received)
        report["restarted_devices"] = sorted(restarted)
        self._verify(report)
        self.phases["collect records"] = time.perf_counter() - collecting
        report["phases_seconds"] = dict(self.phases)
        written = self._write_outputs(values) if self.settings.write_outputs else ()
        if self.settings.report_path:
            self._write_report(report)
        return RunResult(self.spec.name, values, report, self.plan, self.backend, link, written)

    def submit(self, client: Any, compiled: CompiledGraph, keys: Sequence[str], progress: bool = False) -> dict[str, Any]:
        """Send a graph; return futures for ``keys`` and for its sinks (ops nothing reads)."""
        self.key_owner.update(compiled.key_owner)
        self.task_count += len(compiled.tasks)
        self.move_count += compiled.transfers
        wanted = list(dict.fromkeys([*keys, *compiled.sink_keys]))
        futures = client.get(compiled.graph, wanted, sync=False, optimize_graph=False)
        if progress and (self.settings.progress or (self.settings.progress is None and sys.stdout.isatty())):
            from distributed import progress as progress_bar

            progress_bar(futures)
            print()
        return dict(zip(wanted, futures))

    def gather_outputs(self, client: Any, output_keys: Mapping[str, str], futures: Mapping[str, Any],
                       sinks: Sequence[str] = ()) -> dict[str, Any]:
        """Fetch the output values; wait for the sinks; turn Dask's errors into ours naming the op."""
        from distributed import wait

        try:
            # (no outputs: no gather, which would still cost a round trip)
            results = client.gather([futures[k] for k in output_keys.values()]) if output_keys else []
            pending = [futures[k] for k in sinks if k in futures]
            wait(pending)
            for future in pending:
                if future.status == "error":
                    future.result()  # raises the op's error
        except OrchestratorError:
            raise
        except Exception as exc:
            raise self.translate(exc) from None
        return dict(zip(output_keys, results))

    def translate(self, exc: Exception) -> RunError:
        text = f"{type(exc).__name__}: {exc}"
        # the longest key named: under kind naming one op's key can be the start of another's
        key = max((k for k in self.key_owner if k in str(exc)), key=len, default=None)
        op = self.key_owner.get(key or "", "?")
        device = self.plan.placement(op).device_name if op != "?" else "?"
        if type(exc).__name__ == "NoValidWorkerError":
            return NoWorkerError(f"op '{op}' cannot run: no worker offers its device {device} "
                                 f"(waited {self.spec.run.no_workers_timeout:g} s)")
        if type(exc).__name__ == "KilledWorker":
            return RunError(f"op '{op}' on {device}: its worker died while running it more often than allowed "
                            f"(set retries: N on the op)")
        return RunError(f"op '{op}' on {device} failed: {text}")

    # ------------------------------------------------------------------ after the run

    def _report(self, events: Sequence[Mapping[str, Any]], stats: Mapping[str, Mapping[str, Any]],
                elapsed: float) -> dict[str, Any]:
        ran: dict[str, Mapping[str, Any]] = {}
        failures: dict[str, int] = {}
        moved = 0
        for e in events:
            if e.get("kind") == "op":
                ran[e["op"]] = e
            elif e.get("kind") == "failed":
                failures[e["op"]] = failures.get(e["op"], 0) + int(e.get("count", 1))
            elif e.get("kind") == "move":
                moved += int(e.get("bytes", 0)) * int(e.get("count", 1))
        ops = []
        for p in self.plan.placements:
            e = ran.get(p.op, {})
            ops.append({"name": p.op, "op": p.kind, "planned_device": p.device_name, "worker": e.get("ran_on"),
                        "start": e.get("start"), "duration": e.get("duration"), "output_bytes": e.get("bytes"),
                        "retries": failures.get(p.op, 0), "runs": e.get("count"), "why": p.why()})
        devices = []
        for m in self.plan.memory:
            seen = next((s for s in stats.values() if s.get("ran_on") == m.device), {})
            devices.append({"device": m.device, "ops": len(m.ops), "planned_peak_bytes": m.peak,
                            "limit_bytes": m.limit, "peak_bytes_seen": seen.get("peak"),
                            "backend": seen.get("backend")})
        placement: dict[str, dict[str, int]] = {}
        for entry in ops:
            slot = placement.setdefault(entry["worker"] or entry["planned_device"], {"ops": 0, "bytes": 0})
            slot["ops"] += 1
            slot["bytes"] += int(entry["output_bytes"] or 0)
        return {"format": 1, "name": self.spec.name, "file": self.spec.file, "run": self.token,
                "backend": self.backend, "task_names": {"naming": self.task_names, "why": self.task_names_why},
                "elapsed_seconds": elapsed, "ops": ops, "devices": devices,
                "placement": placement, "totals": {"ops": len(ops), "tasks": self.task_count,
                                                   "bytes_moved": moved, "moves": self.move_count}}

    def _verify(self, report: dict[str, Any]) -> None:
        wrong, unverified = [], []
        restarted = set(report.get("restarted_devices", ()))
        for entry in report["ops"]:
            worker, planned = entry["worker"], entry["planned_device"]
            if entry["name"] in self.not_run:
                entry["note"] = self.not_run[entry["name"]]
            elif worker is None and planned in restarted:
                unverified.append(entry["name"])  # its record died with the worker that ran it
            elif worker is None:
                wrong.append(f"{entry['name']}: no record of where it ran (planned {planned})")
            elif worker != planned and not DeviceSpec.parse(planned).matches(_spec_or_empty(worker)):
                wrong.append(f"{entry['name']}: ran on {worker}, planned {planned}")
        report["unverified"] = unverified
        if unverified:
            self.echo(f"note: {len(unverified)} op(s) ran on a worker that was restarted later; "
                      f"their placement could not be verified: {', '.join(unverified[:5])}")
        if wrong:
            raise PlacementMismatch("ops did not run where planned:\n  " + "\n  ".join(wrong))

    def _write_outputs(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        allow = self.spec.run.allow_absolute_paths
        staged: list[tuple[str, Any]] = []
        for out in self.spec.outputs:
            value = np.asarray(values[str(out.ref)])
            if out.target == "-":
                continue
            staged.append((resolve_output(out.target, self.output_dir, allow), value))
        temps: list[tuple[Any, str]] = []
        try:
            for path, value in staged:
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                ctx = atomic_open(path, "wb")
                handle = ctx.__enter__()
                temps.append((ctx, path))  # before writing: a failed write must remove its temp too
                _write_array(handle, path, value)
        except BaseException as exc:
            for ctx, _ in temps:
                ctx.__exit__(RuntimeError, RuntimeError("aborted"), None)
            if isinstance(exc, OSError):
                raise RunError(f"cannot write output {exc.filename or path}: {exc.strerror or exc}") from None
            raise
        for ctx, _ in temps:
            ctx.__exit__(None, None, None)
        for out in self.spec.outputs:
            if out.target == "-":
                self.echo(f"{out.ref} =\n{np.array2string(np.asarray(values[str(out.ref)]), threshold=50)}")
        for _, path in temps:
            self.echo(f"wrote {os.path.relpath(path)}")
        return tuple(path for _, path in temps)

    def _write_report(self, report: Mapping[str, Any]) -> None:
        import json

        from ..atomic import write_text

        write_text(self.settings.report_path or "run.json", json.dumps(report, indent=2, default=str) + "\n")


def _write_array(handle: Any, path: str, value: np.ndarray) -> None:
    if path.endswith(".npz"):
        np.savez(handle, value=value)
    elif path.endswith(".csv"):
        if value.ndim > 2:
            raise RunError(f"cannot write a {value.ndim}-D array to CSV file {path}; use .npy")
        np.savetxt(handle, np.atleast_1d(value), delimiter=",")
    else:
        np.save(handle, value, allow_pickle=False)


def _spec_or_empty(text: str) -> DeviceSpec:
    try:
        return DeviceSpec.parse(text)
    except OrchestratorError:
        return DeviceSpec()


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _wait_forever() -> None:
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass


def run_plan(plan: Plan, settings: RunSettings | None = None, echo: Echo | None = None) -> RunResult:
    return Runner(plan, settings or RunSettings(), echo or (lambda text: print(text, flush=True))).run()
