"""A run that re-plans on the devices still there when one is lost for good (``run.on_device_lost: replan``).

Policy. A lost device worker is first treated as ``wait`` treats it
(``execute.losses``: Dask may run its work again, ``WAIT_LOSSES`` times):
a worker that comes back for the device within ``run.replan_after``
seconds (its nanny restarted it, or its ``orchestrate worker`` was started
again) gets its work redone there, and nothing else changes. Only a device
whose worker has not said it is back by then (``LossWatch.joins``, counted
per device) is gone for good: the run ends the work of this attempt
(:class:`DeviceGone`, a missing device, so a sweep's copy does not take it
for its own failure; the other workers are told to drop what waits for it,
the checkpoints under way are written), and asks the planning stages for
the plan without every device lost so far. That re-plan is the one
``orchestrate plan SPEC --without DEVICE`` prints (``api.replan_file``:
the spec checked again on ``Cluster.without``, placed, its memory
planned), made by ``api`` (the only caller of the planning deciders) and
handed here as a :data:`Replanner`: patterns and ``replicate`` over
``/gpu:*`` shrink, a sweep's copies move to the devices left (within the
packing's caps), an op pinned to a lost device is an error naming it unless
``placement.soft`` moves it, and the memory plan says what no longer fits.
The run prints the re-plan's heading, diagnostics and plan diff; a re-plan
that does not hold ends the run in one line naming the first error.

How it goes on. The rest runs on the new plan as ``--resume`` would run it,
on the same scheduler (an embedded cluster is started again with the
devices left): each loop from its newest checkpoint, read under the
revision of the plan it continues (the re-plan's loop body has fewer
towers, so its own key differs, yet its math is the same: a ``combine:
mean`` weighs each tower's rows, so a step on fewer towers equals a step on
more up to rounding); a loop without checkpoints starts again from step 0,
and ops outside loops run again unless the cache holds them. Why not keep
the last finished window's states on the client instead: the states of a
window live on the workers, one of which is gone, and the checkpoint is the
state the run already keeps for exactly this; the cost is the steps since
it, which the run report says (``steps_redone``; the window in flight at the
loss is not counted: the client had not read it).

Both ways. The re-planned run watches the devices it is without: once a
worker says it stands for one again (``LossWatch.joins``), the run takes it
up at the next checkpoint of the loop it is running (:class:`DeviceBack`,
raised at the first wait after that checkpoint was handed to its writer, so
the change of plans redoes no step): the plan with it again (the full plan
when every lost device is back, else a re-plan without the others) goes on
from that checkpoint. Why at a checkpoint and not at any window boundary:
a change of plans ends the attempt, and the checkpoint is what the next one
goes on from; a loop without checkpoints, or a part of the run outside
loops, keeps the plan it has.

State: per attempt, the devices lost and not back with when they were lost
(:class:`GraceLosses`), the devices watched for their return, each loop's
steps done and where it resumed (for the steps redone, for when the
re-planned run is back where the loss found it, and for the checkpoint a
returning device is taken up at); across attempts, the losses so far with
their re-plans, the devices lost so far and when the run began (the
report's elapsed time is the whole run's).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..cache import compute_keys
from ..errors import NoWorkerError, RunError
from ..plan.records import Plan
from .loops import StagedRun
from .losses import LossWatch, Losses
from .outputs import OnWorkers
from .records import DeviceLoss, RunReport, RunResult, RunSettings
from .run import Echo, Runner
from .waiting import Waiter


@dataclass(frozen=True)
class Replanned:
    """The planning stages' answer for the devices lost so far (made by ``api``): the re-plan, when it holds."""

    plan: Plan | None  # None: the re-plan does not hold (``problem`` says why)
    text: str  # its heading, diagnostics and plan diff, as ``orchestrate plan --without`` prints them
    diff: Mapping[str, Any] | None = None  # the plan diff as data (``report.diff.plan_diff_dict``)
    problem: str = ""  # its first error, in one line


Replanner = Callable[[tuple[str, ...]], Replanned]


class DeviceBack(NoWorkerError):
    """Devices lost for good whose workers are back: at a loop's checkpoint the run re-plans with them.
    (A missing device's kind of error only so that no sweep's copy takes it for its own failure.)"""

    def __init__(self, devices: tuple[str, ...]):
        self.devices = devices
        super().__init__(f"{', '.join(devices)} back")


class DeviceGone(NoWorkerError):
    """Devices whose workers did not come back within ``run.replan_after``: the run re-plans without them."""

    def __init__(self, devices: tuple[str, ...], losses: Sequence[DeviceLoss], waited: float, lost_at: float):
        self.devices, self.losses, self.waited, self.lost_at = devices, tuple(losses), waited, lost_at
        super().__init__(f"lost {', '.join(devices)} for good: not back within {waited:g} s")


@dataclass
class GraceLosses(Losses):
    """``wait``'s losses, each given ``replan_after`` seconds to come back before the run re-plans."""

    replan_after: float = 20.0
    pending: dict[str, tuple[float, int]] = field(default_factory=dict)  # device -> (lost at, its joins then)
    # (the client's clock, time.time(): the report's "seconds" of a re-plan are counted from it)
    away: frozenset[str] = frozenset()  # devices an earlier re-plan went on without: watched for their return
    present: frozenset[str] = frozenset()  # of those, the ones whose workers were there when this attempt began
    boundary: Callable[[], bool] | None = None  # is the run where it can change plans (a loop's checkpoint)?

    def decide(self, removal: Any, device: str) -> None:
        told = len(self.decided)
        super().decide(removal, device)
        if len(self.decided) > told and device not in self.pending:
            self.pending[device] = (time.time(), self.watch.joins.get(device, 0))

    def check(self) -> None:
        super().check()
        gone = False
        for device, (lost_at, joins) in list(self.pending.items()):
            if self.watch.joins.get(device, 0) > joins:  # back within the grace: its work is redone there
                del self.pending[device]
            elif time.time() - lost_at >= self.replan_after:
                gone = True
        if gone:  # every device not back goes with it (a task's devices are lost together)
            raise DeviceGone(tuple(self.pending), self.decided, self.replan_after,
                             min(lost_at for lost_at, _ in self.pending.values()))
        back = tuple(d for d in sorted(self.away) if d in self.present or self.watch.joins.get(d, 0) > 0)
        if back and self.boundary is not None and self.boundary():
            raise DeviceBack(back)


class ReplanningRunner(Runner):
    """The runner of one attempt: its losses wait ``replan_after``; it counts each loop's steps done."""

    def __init__(self, plan: Plan, settings: RunSettings, echo: Echo, earlier: Sequence[DeviceLoss] = (),
                 began: float | None = None, away: Sequence[str] = ()):
        super().__init__(plan, settings, echo)
        self.away = tuple(away)  # the devices this attempt's plan is without (each watched for its return)
        self.last_loop = ""  # the loop whose window was read last
        self.earlier = list(earlier)  # the losses of the attempts before, with their re-plans
        self.began = began if began is not None else time.time()
        self.done: dict[str, int] = {}  # loop -> its steps done in this attempt (windows read)
        self.reached: dict[str, float] = {}  # loop -> when it got back past the step the last loss found it at
        self.targets: Mapping[str, int] = next((loss.replan["steps_done"] for loss in reversed(self.earlier)
                                                if loss.replan is not None and "steps_done" in loss.replan), {})
        self.started_at = self.began
        self.resumed: dict[str, int] = {}  # loop -> the checkpoint step it resumed from in this attempt

    def watch_losses(self, retries: int) -> None:
        watch = LossWatch(self.client, [*(d.name for d in self.spec.cluster.devices), *self.away])
        present = frozenset(name for name in watch.names.values() if name in self.away)
        self.losses = GraceLosses(self.plan, self.token, retries, watch, self, self.echo, self.why_redone,
                                  replan_after=self.spec.run.replan_after, away=frozenset(self.away),
                                  present=present, boundary=self.at_checkpoint)
        self.waiter = Waiter(self.client, self.losses)

    def at_checkpoint(self) -> bool:
        """Has the loop read last just written a checkpoint (so a change of plans redoes no step)?"""
        loop = self.spec.loop(self.last_loop) if self.last_loop else None
        done = self.done.get(self.last_loop, 0)
        every = loop.checkpoint.every if loop is not None and loop.checkpoint is not None else 0
        return loop is not None and every > 0 and 0 < done < loop.steps and done % every == 0

    def no_workers_timeout(self, retries: int) -> float:
        """A lost device's tasks wait for its worker through the grace, and Dask must not fail them first."""
        return max(super().no_workers_timeout(retries), self.spec.run.replan_after + 60.0)

    def translate(self, exc: Exception) -> RunError:
        """A task of a lost device that Dask gave up waiting for (a remote scheduler's own, shorter
        ``no-workers-timeout``) ends the grace: its device is gone for good."""
        losses = self.losses
        if type(exc).__name__ == "NoValidWorkerError" and isinstance(losses, GraceLosses) and losses.pending:
            lost_at = min(at for at, _ in losses.pending.values())
            return DeviceGone(tuple(losses.pending), losses.decided, round(time.time() - lost_at, 1), lost_at)
        return super().translate(exc)

    def loop_progress(self, loop: str, done: int, steps: int, note: str = "") -> None:
        self.done[loop], self.last_loop = done, loop
        target = self.targets.get(loop)
        if target is not None and done >= target and loop not in self.reached:
            self.reached[loop] = time.time()
        super().loop_progress(loop, done, steps, note)

    def finish(self, report: RunReport, values: dict[str, Any], on_workers: OnWorkers,
               link: str | None) -> RunResult:
        """The report of the whole run: every attempt's losses, each re-plan with what it cost."""
        earlier = [self.settled(loss) for loss in self.earlier]
        report = replace(report, losses=(*earlier, *report.losses), elapsed_seconds=time.time() - self.began)
        return super().finish(report, values, on_workers, link)

    def settled(self, loss: DeviceLoss) -> DeviceLoss:
        """A re-planned loss with the steps it redid and its time: from the loss until the run was back there."""
        if loss.replan is None or "lost_at" not in loss.replan:
            return loss
        info = dict(loss.replan)
        lost_at, done_before = info.pop("lost_at"), info.pop("steps_done")
        resumed = {**{name: outcome.resumed_from_step for name, outcome in self.loop_outcomes.items()}, **self.resumed}
        info["resumed_from_step"] = {loop: resumed.get(loop, 0) for loop in done_before}
        info["steps_redone"] = {loop: max(0, done - resumed.get(loop, 0)) for loop, done in done_before.items()}
        back = max([self.reached.get(loop, time.time()) for loop in done_before] or [self.started_at])
        info["seconds"] = round(back - lost_at, 3)
        return replace(loss, replan=info)

    def run(self) -> RunResult:
        self.started_at = time.time()
        return super().run()

    def run_staged(self, staged: StagedRun) -> dict[str, Any]:
        """(Where each loop resumed is read from its checkpoints' reader: a loop cut short has no outcome.)"""
        try:
            return super().run_staged(staged)
        finally:
            if staged.checkpoints is not None:
                self.resumed.update(staged.checkpoints.resumed)


def run_replanning(plan: Plan, settings: RunSettings, echo: Echo, replanner: Replanner) -> RunResult:
    """Run ``plan``; each time devices are lost for good, re-plan without them and go on; when they are back,
    at a loop's checkpoint, re-plan with them (see the module)."""
    full, base_dir = plan, plan.spec.document.directory
    revisions = compute_keys(plan, base_dir, settings.cache_files).revisions  # the checkpoints' keys: the full plan's
    lost: tuple[str, ...] = ()
    losses: list[DeviceLoss] = []
    began = time.time()
    while True:
        runner = ReplanningRunner(plan, settings, echo, losses, began, lost)
        try:
            return runner.run()
        except DeviceGone as gone:
            lost = tuple(dict.fromkeys([*lost, *gone.devices]))
            echo(f"{gone}; re-planning on the devices left")
            answer = replanner(lost)
            echo(answer.text.rstrip("\n"))
            replan = {"without": list(lost), "diff": dict(answer.diff) if answer.diff is not None else None,
                      "lost_at": gone.lost_at, "steps_done": dict(runner.done)}
            losses = [runner.settled(loss) for loss in losses]  # (settled by the attempt that went on from them)
            losses += [_replanned(loss, gone, replan, answer) for loss in gone.losses]
            if answer.plan is None:
                raise NoWorkerError(f"{gone}, and the re-plan on the devices left does not hold: "
                                    f"{answer.problem}") from None
            plan = answer.plan
        except DeviceBack as back:
            lost = tuple(device for device in lost if device not in back.devices)
            step = runner.done.get(runner.last_loop, 0)
            echo(f"{back} (their workers joined again): at the checkpoint of loop '{runner.last_loop}' at step "
                 f"{step}, the run goes on {'re-planned without ' + ', '.join(lost) if lost else 'on the full plan'}")
            answer = replanner(lost) if lost else Replanned(full, "")
            if answer.text:
                echo(answer.text.rstrip("\n"))
            if answer.plan is None:  # (the spec planned with these devices before: a spec file changed meanwhile)
                raise NoWorkerError(f"{back}, and the re-plan with them does not hold: {answer.problem}") from None
            losses = [_back(runner.settled(loss), back.devices, step, began) for loss in losses]
            plan = answer.plan
        settings = replace(settings, resume_revisions=dict(revisions))


def _back(loss: DeviceLoss, devices: Sequence[str], step: int, began: float) -> DeviceLoss:
    """A re-planned loss whose device is back: where the run took it up again (``replan`` both ways)."""
    if loss.replan is None or loss.device not in devices or "back" in loss.replan:
        return loss
    return replace(loss, replan={**loss.replan, "back": {"step": step, "seconds": round(time.time() - began, 3)}})


def _replanned(loss: DeviceLoss, gone: DeviceGone, replan: Mapping[str, Any], answer: Replanned) -> DeviceLoss:
    """A loss of the attempt that ended: re-planned (its device gone), or as it was (its work was redone)."""
    if loss.device not in gone.devices or loss.replan is not None:
        return loss
    outcome = "re-planned without it" if answer.plan is not None else "failed the run (the re-plan does not hold)"
    return replace(loss, outcome=outcome, replan=dict(replan) if answer.plan is not None else None)
