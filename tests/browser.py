"""Headless Chromium for the browser tests and the docs' screenshots, driven over the DevTools protocol.

A page of ours is drawn by Bokeh, and Bokeh draws late: the HTML arrives, then its
script builds the documents, lays them out and paints each figure into a canvas inside
a shadow root. Chromium's ``--dump-dom`` shows none of that (the dump of a run report is
one empty ``bk-Column`` element) and its ``--virtual-time-budget`` is a guess at how
long to wait. So this module speaks Chrome's DevTools protocol (CDP) instead, over the
pipe Chromium opens with ``--remote-debugging-pipe`` (fd 3 in, fd 4 out, one JSON
message per NUL-terminated line): no websocket, no webdriver, no package beyond the
standard library. A test then asks the page itself, again and again, whether what it
waits for is there (:meth:`Page.wait_for`), and times out only on a generous deadline:
on a busy machine the wait is longer, never wrong.

:data:`BOKEH_PROBE` is that question for Bokeh: it answers nothing until every Bokeh
document on the page is idle and every view has finished drawing, then describes each
plot that was drawn (its title, every string its models hold: axis labels, factors,
legend labels, the labels in its data) with the count of "ink" pixels painted inside
its frame, darker than the grid, so that a plot laid out but left empty shows as 0.
:func:`bokeh_drawn` waits for it, and for a condition on it when the data arrives
later (a live dashboard).

Chromium is found by :func:`find_chromium` (``$CHROMIUM``, else ``chromium`` and its
other names on PATH). Where there is none, :data:`NO_CHROMIUM` is the note a test
skips with; ``.ci/run`` installs Debian's ``chromium`` where it is missing.

The same module is the tool that writes the docs' screenshots::

    .venv/bin/python tests/browser.py screenshot URL_OR_FILE OUT.png [--width W] [--height H] [--full-page]
        [--wait-bokeh] [--wait-text TEXT]...
    .venv/bin/python tests/browser.py probe URL_OR_FILE [--wait-text TEXT]...   # what the probe sees, as JSON

and ``make screenshots`` runs ``benchmarks/screenshots.py``, which makes every picture
of docs/images/ from real runs.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
NO_CHROMIUM = ("no Chromium here (Debian: apt-get install -y --no-install-recommends chromium; "
               "or set CHROMIUM=/path/to/chrome): the browser tests are skipped")

# Generous on purpose: two cores shared with other test runs can take tens of seconds to start
# Chromium and draw a page of a megabyte of inline JavaScript. Every wait ends as soon as its
# content is there.
DEFAULT_TIMEOUT = 120.0

FLAGS = (
    "--headless=new", "--disable-gpu",
    # root in a container, where Chromium's sandbox cannot start; the pages are our own
    "--no-sandbox",
    # no network but loopback here: without these Chromium keeps reaching for Google's hosts
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
    "--disable-default-apps", "--disable-extensions", "--disable-quic", "--mute-audio",
    "--hide-scrollbars", "--no-default-browser-check",
    # a page in a background tab of a busy machine must not be throttled while a test waits on it
    "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
)


def find_chromium() -> str | None:
    """$CHROMIUM, else the first Chromium or Chrome on PATH."""
    named = os.environ.get("CHROMIUM")
    if named:
        return shutil.which(named) or (named if Path(named).is_file() else None)
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def as_url(target: str | os.PathLike[str]) -> str:
    """A URL as given; a path as its file:// URL."""
    text = os.fspath(target)
    if "://" in text or text.startswith(("about:", "data:")):
        return text
    return Path(text).resolve().as_uri()


class BrowserError(AssertionError):
    """Chromium failed, or a page did not show what a test waited for (an AssertionError: pytest shows it as one)."""


def _high_fd(fd: int) -> int:
    """``fd`` moved to 10 or above, so that the shell's ``3<&N 4>&M`` cannot overwrite one of them."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


class Chromium:
    """One headless Chromium, its DevTools protocol on a pair of pipes; a context manager that closes it."""

    def __init__(self, executable: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> None:
        browser = executable or find_chromium()
        if browser is None:
            raise BrowserError(NO_CHROMIUM)
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="chromium-profile-")
        self._log = open(Path(self._profile.name) / "chromium.log", "w+b")  # noqa: SIM115 (closed in close())
        to_browser, to_here = (_high_fd(fd) for fd in os.pipe())
        from_browser, from_here = (_high_fd(fd) for fd in os.pipe())
        # bash puts the pipes where Chromium looks for them (3: commands in, 4: replies out); Popen's
        # preexec_fn could too, but it is unsafe in a process with threads (Dask's client), and dash
        # (Debian's sh) reads no descriptor above 9
        command = ["bash", "-c", f'exec "$0" "$@" 3<&{to_browser} 4>&{from_here}', browser, *FLAGS,
                   "--remote-debugging-pipe", f"--user-data-dir={self._profile.name}", "about:blank"]
        self._process = subprocess.Popen(command, pass_fds=(to_browser, from_here), stdin=subprocess.DEVNULL,
                                         stdout=self._log, stderr=self._log, start_new_session=True)
        os.close(to_browser)
        os.close(from_here)
        self._out = os.fdopen(to_here, "wb", buffering=0)
        self._in = from_browser
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="chromium-cdp", daemon=True)
        self._reader.start()
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.version = self.send("Browser.getVersion")["product"]

    def _read(self) -> None:
        """Split the replies and events on NUL and queue them; None once Chromium closed its end."""
        pending = b""
        while True:
            try:
                chunk = os.read(self._in, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                self._messages.put(None)
                return
            pending += chunk
            *whole, pending = pending.split(b"\0")
            for message in whole:
                self._messages.put(json.loads(message))

    def log_tail(self, chars: int = 2000) -> str:
        """The end of what Chromium printed: why it failed to start or crashed."""
        self._log.flush()
        return (Path(self._profile.name) / "chromium.log").read_bytes()[-chars:].decode("utf-8", "replace")

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float | None = None) -> dict[str, Any]:
        """Send one command and wait for its reply, keeping the events that come before it."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        try:
            self._out.write(json.dumps(message).encode() + b"\0")
        except OSError as error:
            raise BrowserError(f"Chromium is gone ({error}); it said:\n{self.log_tail()}") from None
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            left = deadline - time.monotonic()
            try:
                reply = self._messages.get(timeout=max(left, 0.01))
            except queue.Empty:
                raise BrowserError(f"Chromium did not answer {method} in {timeout or self.timeout:.0f} s") from None
            if reply is None:
                self._messages.put(None)
                raise BrowserError(f"Chromium closed while answering {method}; it said:\n{self.log_tail()}")
            if reply.get("id") == message["id"]:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')} {reply['error'].get('data', '')}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def open(self, target: str | os.PathLike[str], width: int = 1400, height: int = 1000) -> Page:
        """A new tab of ``width`` x ``height`` CSS pixels showing ``target`` (a URL or a file), once it has loaded."""
        target_id = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target_id, "flatten": True})["sessionId"]
        page = Page(self, session)
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable", session=session)
        page.resize(width, height)
        url = as_url(target)
        navigated = self.send("Page.navigate", {"url": url}, session=session)
        if navigated.get("errorText"):
            raise BrowserError(f"Chromium could not load {url}: {navigated['errorText']}")
        page.wait_for("document.readyState === 'complete'", f"{url} to load")
        return page

    def close(self) -> None:
        """Ask Chromium to quit, then end it if it does not; remove its profile."""
        if self._process.poll() is None:
            try:
                self.send("Browser.close", timeout=10)
            except BrowserError:
                pass
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, 9)  # its own session: the renderers and zygote go with it
                self._process.wait()
        self._out.close()
        self._reader.join(timeout=10)
        os.close(self._in)
        self._log.close()
        self._profile.cleanup()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


@dataclass
class Page:
    """One tab: evaluate JavaScript in it, wait for a condition, take its picture."""

    browser: Chromium
    session: str

    def resize(self, width: int, height: int) -> None:
        self.browser.send("Emulation.setDeviceMetricsOverride",
                          {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
                          session=self.session)

    def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` in the page (a promise is awaited), as JSON gives it back."""
        done = self.browser.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                      "awaitPromise": True}, session=self.session)
        if "exceptionDetails" in done:
            details = done["exceptionDetails"]
            raise BrowserError(f"the page threw: {details.get('exception', {}).get('description') or details}")
        return done["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout: float | None = None,
                 until: Callable[[Any], bool] = bool) -> Any:
        """Evaluate ``expression`` until ``until`` holds for its value (truthy by default); that value.

        Polls every fifth of a second: the wait is as long as the page takes, up to ``timeout``,
        which fails naming ``what`` with the last value seen and the page's errors."""
        limit = timeout or self.browser.timeout
        deadline = time.monotonic() + limit
        value: Any = None
        while True:
            value = self.evaluate(expression)
            if until(value):
                return value
            if time.monotonic() > deadline:
                raise BrowserError(f"waited {limit:.0f} s for {what}; last seen: {str(value)[:2000]}\n"
                                   f"page errors: {self.errors() or 'none'}")
            time.sleep(0.2)

    def errors(self) -> list[str]:
        """Uncaught exceptions and console errors of this tab so far."""
        found = []
        for event in self.browser.events:
            if event.get("sessionId") != self.session:
                continue
            params = event.get("params", {})
            if event.get("method") == "Runtime.exceptionThrown":
                details = params.get("exceptionDetails", {})
                found.append(details.get("exception", {}).get("description") or details.get("text", "exception"))
            elif event.get("method") == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(" ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", [])))
            elif event.get("method") == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                entry = params["entry"]
                found.append(f"{entry.get('text')} {entry.get('url', '')}".strip())
        return found

    def console(self) -> list[str]:
        """Every console message of this tab so far, errors included."""
        return [" ".join(str(a.get("value", a.get("description", ""))) for a in e["params"].get("args", []))
                for e in self.browser.events
                if e.get("sessionId") == self.session and e.get("method") == "Runtime.consoleAPICalled"]

    def screenshot(self, path: str | os.PathLike[str], full_page: bool = False) -> Path:
        """Write what the tab shows as a PNG (the whole page's height with ``full_page``)."""
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            metrics = self.browser.send("Page.getLayoutMetrics", session=self.session)["cssContentSize"]
            params["captureBeyondViewport"] = True
            params["clip"] = {"x": 0, "y": 0, "width": metrics["width"], "height": metrics["height"], "scale": 1}
        import base64

        data = self.browser.send("Page.captureScreenshot", params, session=self.session)["data"]
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(data))
        return out

    def text(self) -> str:
        """The text a reader sees: the page's, and that of every shadow root (Bokeh's Divs and tables)."""
        value = self.evaluate(PAGE_TEXT)
        return str(value)


PAGE_TEXT = """(() => {
  const parts = [];
  const walk = (node) => {
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const child of node.childNodes) {
      if (child.nodeType === Node.TEXT_NODE) parts.push(child.textContent);
      else if (child.nodeType === Node.ELEMENT_NODE && !["SCRIPT", "STYLE"].includes(child.tagName)) walk(child);
    }
  };
  walk(document.body);
  return parts.join(" ").replace(/\\s+/g, " ");
})()"""

# Nothing (null) until Bokeh is there with every document idle and every view finished; then what was drawn.
BOKEH_PROBE = """(() => {
  const B = window.Bokeh;
  if (!B || !B.index || !B.documents || B.documents.length === 0) return null;
  if (!B.documents.every((d) => d.is_idle)) return null;
  // the roots finish once every view that draws has (tools and data views never say so themselves);
  // Bokeh.index is a ViewManager from Bokeh 3.2 on, a plain object of the root views before
  const roots = B.index.roots !== undefined ? B.index.roots : Object.values(B.index);
  if (roots.length === 0 || !roots.every((v) => v.has_finished())) return null;
  const views = [];
  const walk = (view) => {
    views.push(view);
    for (const child of (view.children_views ? view.children_views() : view.children())) walk(child);
  };
  roots.forEach(walk);
  const strings = (value, into, depth) => {
    if (depth > 6 || value == null) return;
    if (typeof value === "string") { into.add(value); return; }
    if (typeof value !== "object" || ArrayBuffer.isView(value)) return;
    if (value.constructor && value.constructor.__qualified__) return;  // a model: listed by references()
    const items = value instanceof Map ? value.values() : Array.isArray(value) ? value : Object.values(value);
    for (const item of items) strings(item, into, depth + 1);
  };
  const ink = (view) => {
    const layer = view.export("png", false);
    const box = view.frame.bbox;
    const [x, y, w, h] = [box.left + 2, box.top + 2, box.width - 4, box.height - 4].map(Math.round);
    if (w <= 0 || h <= 0) return 0;
    const pixels = layer.ctx.getImageData(x, y, w, h).data;
    let count = 0;  // darker or more coloured than the grid's light grey on white
    for (let i = 0; i < pixels.length; i += 4) {
      const [r, g, b, a] = [pixels[i], pixels[i + 1], pixels[i + 2], pixels[i + 3]];
      if (a > 0 && Math.max(Math.abs(r - g), Math.abs(g - b), Math.abs(r - b)) > 40 || Math.max(r, g, b) < 200) count++;
    }
    return count;
  };
  const plots = views.filter((v) => v.canvas_view !== undefined && v.frame !== undefined).map((v) => {
    const found = new Set();
    for (const model of [v.model, ...v.model.references()]) strings(model.attributes, found, 0);
    const title = v.model.title;
    return {id: v.model.id, type: v.model.type, title: title && title.text !== undefined ? title.text : "",
            strings: [...found], ink: ink(v), width: v.bbox.width, height: v.bbox.height};
  });
  return {documents: B.documents.length, views: views.length, version: B.version, plots};
})()"""


@dataclass(frozen=True)
class Plot:
    """A drawn Bokeh plot: its title, the strings of its models, the ink in its frame, its size."""

    title: str
    type: str
    strings: frozenset[str]
    ink: int
    width: float
    height: float


@dataclass(frozen=True)
class Drawn:
    """What the probe saw once Bokeh finished: the documents, their plots and the page's text."""

    documents: int
    plots: tuple[Plot, ...]
    text: str
    version: str

    def strings(self) -> set[str]:
        return {s for p in self.plots for s in p.strings}

    def plot(self, title_part: str) -> Plot:
        """The one plot whose title holds ``title_part``."""
        found = [p for p in self.plots if title_part in p.title]
        if len(found) != 1:
            raise BrowserError(f"{len(found)} plots titled with {title_part!r}; titles: {[p.title for p in self.plots]}")
        return found[0]

    def shows(self, text: str) -> bool:
        """Whether ``text`` is drawn in a plot (a string of its models) or is in the page's text."""
        return text in self.text or any(text in s for p in self.plots for s in p.strings)


def _drawn(value: dict[str, Any], text: str) -> Drawn:
    plots = tuple(Plot(p["title"], p["type"], frozenset(p["strings"]), p["ink"], p["width"], p["height"])
                  for p in value["plots"])
    return Drawn(value["documents"], plots, text, value["version"])


def bokeh_drawn(page: Page, until: Callable[[Drawn], bool] | None = None, what: str = "Bokeh to draw",
                timeout: float | None = None) -> Drawn:
    """Wait until Bokeh has drawn the page (and, with ``until``, until what it drew satisfies it)."""
    last: list[Drawn] = []

    def ready(value: Any) -> bool:
        if not value:
            return False
        drawn = _drawn(value, page.text())
        last[:] = [drawn]
        return until is None or until(drawn)

    try:
        page.wait_for(BOKEH_PROBE, what, timeout, until=ready)
    except BrowserError as error:
        if last:  # Bokeh drew, but not what was asked: say what it did draw
            seen = {p.title: sorted(p.strings)[:40] for p in last[0].plots}
            raise BrowserError(f"{error}\nplots drawn: {json.dumps(seen, indent=1)[:4000]}") from None
        raise
    return last[0]


def wait_for_texts(texts: Iterable[str]) -> Callable[[Drawn], bool]:
    """An ``until`` for :func:`bokeh_drawn`: every one of ``texts`` is shown."""
    wanted = list(texts)
    return lambda drawn: all(drawn.shows(t) for t in wanted)


# A run that waits at its gate op until the file $GATE_FILE exists: a page of the live run (Dask's
# /status, our own) is opened while nothing has run past the gate, then the gate opens and the page
# is watched as the run goes on. Three devices, a loop of 40 steps with a metric, a task per partition.
GATED_SPEC = """\
version: 1
name: gated
cluster:
  jobs:
    localhost: {gpus: 2}
graph:
  - {name: a, op: constant, value: [[1.0, 2.0], [3.0, 4.0]], device: /cpu:0}
  - {name: gate, op: call, fn: "gate_fns:wait", inputs: [a], output: {shape: [2, 2]}, device: /cpu:0}
  - {name: b, op: matmul, inputs: [gate, gate], device: /gpu:0}
  - {name: c, op: add, inputs: [b, a], device: /gpu:1}
  - {name: d, op: mul, inputs: [c, c], device: /cpu:0}
  - name: loop
    iterate:
      steps: 40
      window: 5
      state: {w: d}
      body:
        - {name: h, op: mul, inputs: [w], scalar: 0.5, device: /gpu:1}
        - {name: w_next, op: add, inputs: [w, h], device: /gpu:0}
        - {name: size, op: mean, inputs: [w_next], device: /gpu:0}
      update: {w: w_next}
      metrics: {size: size}
outputs:
  loop.w: w.npy
"""

GATE_FNS = '''\
import os
import time


def wait(x, xp=None):
    """Hold the run until the file $GATE_FILE exists (bounded: a test that died leaves no worker waiting)."""
    deadline = time.monotonic() + 300
    while not os.path.exists(os.environ["GATE_FILE"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return x
'''


class GatedRun:
    """``orchestrate run SPEC --keep-alive`` in the background, held at a gate op until :meth:`release`.

    ``spec`` is the spec's text (GATED_SPEC by default: a ``call`` of ``gate_fns:wait`` holds
    it); :attr:`dashboard` is the URL of Dask's /status it printed, :meth:`url` another page of
    the same server. A context manager: Ctrl-C on leaving, and :attr:`said` is what it printed."""

    def __init__(self, where: Path, spec: str = GATED_SPEC, args: Iterable[str] = (),
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        self.where = where
        self.gate = where / "gate-open"
        (where / "gated.yaml").write_text(spec, encoding="utf-8")
        (where / "gate_fns.py").write_text(GATE_FNS, encoding="utf-8")
        orchestrate = Path(sys.executable).parent / "orchestrate"
        self.process = subprocess.Popen(
            [str(orchestrate), "run", "gated.yaml", "--keep-alive", "--no-progress", *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=where,
            env={**os.environ, "GATE_FILE": str(self.gate)})
        self.said = ""
        self.dashboard = self._link(timeout)

    def _link(self, timeout: float) -> str:
        assert self.process.stdout is not None
        lines = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            lines.append(line)
            link = re.search(r"dashboard: (http://127\.0\.0\.1:\d+/status)", line)
            if link:
                return link.group(1)
        self.process.kill()  # silent or gone: nothing more to read
        self.process.wait()
        raise BrowserError("the run printed no dashboard link:\n" + "".join(lines))

    def url(self, path: str) -> str:
        """Another page of the dashboard's server: ``url("/orchestrator")``."""
        return self.dashboard.rsplit("/status", 1)[0] + path

    def release(self) -> None:
        """Open the gate: the run goes on."""
        self.gate.touch()

    def kept_alive(self) -> bool:
        """Wait until the run has finished and says its cluster is kept alive (False: it ended instead)."""
        assert self.process.stdout is not None
        while not self.process.stdout.closed:
            line = self.process.stdout.readline()
            self.said += line
            if not line:
                return False
            if "cluster kept alive" in line:
                return True
        return False

    def stop(self) -> int:
        """Ctrl-C the kept-alive run once it has finished (opening the gate first); its exit code."""
        self.release()
        if self.process.poll() is None and self.kept_alive():
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=DEFAULT_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.poll() is None:  # it ended its output without ending: not ours to wait for
            self.process.kill()
        self.process.wait()
        if self.process.stdout is not None and not self.process.stdout.closed:
            self.said += self.process.stdout.read()
            self.process.stdout.close()
        return self.process.returncode

    def __enter__(self) -> GatedRun:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def _cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    shot = commands.add_parser("screenshot", help="load a page, wait for it, write a PNG")
    shot.add_argument("target", help="a URL or an HTML file")
    shot.add_argument("png")
    shot.add_argument("--width", type=int, default=1400)
    shot.add_argument("--height", type=int, default=1000)
    shot.add_argument("--full-page", action="store_true", help="the whole page's height, not just the window")
    probe = commands.add_parser("probe", help="load a page, wait for Bokeh, print what it drew as JSON")
    probe.add_argument("target", help="a URL or an HTML file")
    for each in (shot, probe):
        each.add_argument("--wait-bokeh", action="store_true", help="wait until Bokeh has drawn (probe always does)")
        each.add_argument("--wait-text", action="append", default=[], metavar="TEXT",
                          help="also wait until TEXT is drawn or in the page (repeatable; implies --wait-bokeh)")
        each.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT)
    args = parser.parse_args(argv)
    if find_chromium() is None:
        print(f"skipped: {NO_CHROMIUM}", file=sys.stderr)
        return 0
    with Chromium(timeout=args.timeout) as browser:
        page = browser.open(args.target, getattr(args, "width", 1400), getattr(args, "height", 1000))
        drawn = None
        if args.command == "probe" or args.wait_bokeh or args.wait_text:
            drawn = bokeh_drawn(page, wait_for_texts(args.wait_text), f"Bokeh to draw {args.wait_text or ''}")
        if args.command == "screenshot":
            out = page.screenshot(args.png, full_page=args.full_page)
            print(f"wrote {out} ({out.stat().st_size} bytes) with {browser.version}")
        else:
            assert drawn is not None
            print(json.dumps({"documents": drawn.documents, "bokeh": drawn.version, "errors": page.errors(),
                              "plots": [{"title": p.title, "type": p.type, "ink": p.ink,
                                         "size": [p.width, p.height], "strings": sorted(p.strings)}
                                        for p in drawn.plots], "text": drawn.text}, indent=1))
    return 0



if __name__ == "__main__":
    sys.exit(_cli())
