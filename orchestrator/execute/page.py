"""The run's live page, the scheduler's half: a scheduler plugin that keeps each run's news and serves the page.

Policy. The page lives where Dask's dashboard does, on the scheduler's HTTP
server (``/orchestrator/``, beside ``/status``), so it works the same for
the embedded cluster and for a remote one whose workers run ``orchestrate
worker``: the client registers :class:`PagePlugin` (idempotent: a
long-lived scheduler keeps the one it has, and the runs it saw) before the
run, and from then on only sends it news, on the client's own stream to the
scheduler, never waiting for an answer (``execute.live``). The page itself
is static HTML that reads ``/orchestrator/state.json`` every second.

What the page shows of each device comes from the device's worker, on Dask's
heartbeat (``runtime.device_metrics``, a worker metric): the memory its
backend holds now, the ops its threads run now, the share of its threads
busy with ops between its last few heartbeats (the plugin keeps them: busy
over time) and the bytes Dask moved into it per run. A scheduler that cannot import this module (a
remote one without orchestrator installed) refuses the plugin: the run goes
on and says that there is no page.

State: per run (the latest :data:`MAX_RUNS`), the plan's summary, each
loop's news with its metric points (thinned to :data:`MAX_POINTS` a series),
the sweeps' decisions, the run's status; per device its busy samples (the
latest :data:`MAX_SAMPLES`).
"""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from distributed.diagnostics.plugin import SchedulerPlugin
from tornado import web
from tornado.ioloop import PeriodicCallback

from ..plan.records import Plan
from ..runtime import DEVICE_METRIC
from .live import LiveFeed, Send
from .page_html import PAGE

PAGE_OP = "orchestrator-page"  # the client's stream message (a scheduler stream handler the plugin adds)
ROUTE = "/orchestrator/"
MAX_RUNS = 4
MAX_POINTS = 2000  # per metric series: past it, every other point goes (the latest stays)
MAX_SAMPLES = 600  # busy samples per device, one a heartbeat (0.5 s on a small cluster): the last five minutes
NOTES = {
    "held": "memory the device's backend holds now (a GPU's arrays: the accounting its cap is checked against; "
            "a CPU device's values are Dask's to hold: Dask's managed bytes)",
    "dask_bytes_stored": "Dask's 'Bytes stored' (and 'process' here) is each worker process's memory as the "
                         "operating system counts it (RSS: Dask's managed values, the interpreter, libraries, "
                         "caches); a GPU's arrays are not in it",
    "busy": "the share of the device's task threads running an op between two heartbeats (about 0.5 s), from the "
            "op seconds its worker counts (a gang window's wait for another device is idle)",
    "moved": "bytes Dask moved into the device for this run (its transfer log); values a gang window sends over "
             "direct links are not in it (the run report counts them after the run)",
}


class PagePlugin(SchedulerPlugin):
    name = "orchestrator-page"
    idempotent = True

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self.busy: dict[str, list[list[float]]] = {}
        self.scheduler: Any = None
        self.sampler: PeriodicCallback | None = None

    async def start(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        scheduler.stream_handlers[PAGE_OP] = self.receive
        scheduler.http_application.add_handlers(r".*", [
            (ROUTE.rstrip("/") + r"/?", _PageHandler), (ROUTE + r"state\.json", _StateHandler, {"plugin": self})])
        self.sampler = PeriodicCallback(self.sample, 1000)
        self.sampler.start()

    async def close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()

    def receive(self, run: str, client: str | None = None, **message: Any) -> None:
        """A run's news (``execute.live``): merged into what the plugin keeps of the run."""
        state = self.runs.get(run)
        if state is None:
            state = self.runs[run] = {"run": run, "status": "running", "loops": {}, "decisions": []}
            for old in list(self.runs)[:-MAX_RUNS]:
                del self.runs[old]
        state.update({k: message[k] for k in ("plan", "status", "started", "ended", "error", "copies") if k in message})
        for name, news in (message.get("loops") or {}).items():
            loop = state["loops"].setdefault(name, {"series": {}, "evaluations": {}})
            for part in ("series", "evaluations"):
                for metric, points in (news.pop(part, None) or {}).items():
                    kept = loop[part].setdefault(metric, [])
                    kept.extend(points)
                    if len(kept) > MAX_POINTS:  # every other point, the latest kept
                        kept[:] = kept[(len(kept) - 1) % 2::2]
            loop.update(news)
        state["decisions"].extend(message.get("decisions") or [])

    def sample(self) -> None:
        """Each device's busy shares, as its heartbeats said them (each repeats the last few): the new ones kept."""
        for ws in list(self.scheduler.workers.values()):
            for mine in _devices_of(ws):
                self._sampled(mine)

    def _sampled(self, mine: dict[str, Any]) -> None:
        samples = self.busy.setdefault(str(mine["device"]), [])
        last = samples[-1][0] if samples else 0.0
        samples.extend([float(at), float(share)] for at, share in mine.get("busy", ()) if at > last)
        del samples[:-MAX_SAMPLES]

    def state(self) -> dict[str, Any]:
        self.sample()
        devices = {}
        for ws, mine in [(ws, mine) for ws in list(self.scheduler.workers.values()) for mine in _devices_of(ws)]:
            device = str(mine["device"])
            memory = ws.memory
            devices[device] = {"address": ws.address, "memory": mine.get("memory", {}), "running": mine["running"],
                               "processing": len(ws.processing), "process_bytes": memory.process,
                               "managed_bytes": memory.managed, "moved": mine.get("moved", {}),
                               "busy": self.busy.get(device, [])}
        return {"now": time.time(), "runs": list(reversed(self.runs.values())), "devices": devices, "notes": NOTES}


def _devices_of(ws: Any) -> list[dict[str, Any]]:
    """What a worker's heartbeat said of each device it stands for (a host worker's: its ``seats``)."""
    mine = ws.metrics.get(DEVICE_METRIC)
    if not isinstance(mine, dict):
        return []
    return [each for each in mine.get("seats") or [mine] if isinstance(each, dict)]


class _PageHandler(web.RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(PAGE)


class _StateHandler(web.RequestHandler):
    def initialize(self, plugin: PagePlugin) -> None:
        self.plugin = plugin

    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.write(json.dumps(self.plugin.state(), default=str))


def open_page(client: Any, plan: Plan, run: str) -> tuple[LiveFeed | None, str]:
    """Register the page's plugin on the scheduler (one round trip, before the run); the run's feed, or None
    and why there is no page."""
    try:
        client.register_plugin(PagePlugin(), name=PagePlugin.name)
    except Exception as exc:  # a remote scheduler without orchestrator: the run goes on without its page
        return None, f"no page: the scheduler refused its plugin ({str(exc).splitlines()[0] if str(exc) else exc})"
    return LiveFeed(plan, run, _sender(client)), ""


def _sender(client: Any) -> Send:
    def send(message: dict[str, Any]) -> None:
        # Dask's client stream (what Client.log_event would take, but that one waits for the answer)
        try:
            client._send_to_scheduler({"op": PAGE_OP, **message})
        except Exception:  # a closed client at the very end: the page misses the last news, the run does not
            pass
    return send


def page_link(dashboard: str) -> str:
    """The page's address beside the dashboard's (``http://host:port/status`` -> ``.../orchestrator/``)."""
    parts = urlsplit(dashboard)
    prefix = parts.path.rsplit("/status", 1)[0] if parts.path.endswith("/status") else parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, prefix + ROUTE, "", ""))
