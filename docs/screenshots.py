"""Make the pictures of docs/images/ from real runs, in headless Chromium (``make screenshots``).

    .venv/bin/python docs/screenshots.py               # every picture
    .venv/bin/python docs/screenshots.py report        # only docs/images/report.png

- ``report.png``: ``orchestrate report --html`` of a run of examples/train.yaml, the whole page;
- ``dask-status.png``: Dask's /status page of a live run (tests/browser.py's gated spec), opened
  while the run waits at its gate, taken once the task stream shows the loop's windows.

Each waits for its content, as the browser tests do (tests/browser.py), never for a fixed
time. A new page of a live run is one more entry of SHOTS: open ``run.url("/PATH")`` where
``dask_status`` opens ``run.dashboard``. Without Chromium it says so and exits 0.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from browser import NO_CHROMIUM, Chromium, GatedRun, bokeh_drawn, find_chromium  # noqa: E402

IMAGES = ROOT / "docs" / "images"


def _quiet(_: str) -> None:
    pass


def report(browser: Chromium, where: Path) -> Path:
    """The run report of examples/train.yaml, drawn: the whole page."""
    from orchestrator import run_file
    from orchestrator.cli import run_cli

    sys.path.insert(0, str(ROOT / "examples"))  # train_fns, beside the spec
    os.chdir(ROOT)  # the page names the spec as examples/train.yaml and the report as run.json
    run_file(Path("examples") / "train.yaml", output_dir=str(where), report_path=str(where / "run.json"),
             echo=_quiet)
    os.chdir(where)
    out = io.StringIO()
    if run_cli(["report", "run.json", "--html", "run.html"], out=out) != 0:
        raise SystemExit(out.getvalue())
    page = browser.open(where / "run.html", 1400, 1000)
    bokeh_drawn(page)
    return page.screenshot(IMAGES / "report.png", full_page=True)


def dask_status(browser: Chromium, where: Path) -> Path:
    """Dask's /status of a live run, once the task stream shows the loop's windows."""
    with GatedRun(where, args=["--task-names", "op"]) as run:
        page = browser.open(run.dashboard, 1400, 900)
        bokeh_drawn(page, lambda d: any(p.title == "Task Stream" for p in d.plots), "the task stream")
        run.release()
        windows = {"loop·GPU:0", "loop·GPU:1"}
        bokeh_drawn(page, lambda d: windows <= d.plot("Task Stream").strings, "the loop's windows")
        return page.screenshot(IMAGES / "dask-status.png")


def run_page(example: str, until: str, what: str) -> Callable[[Chromium, Path], Path]:
    """Our page (/orchestrator/) of a live run of ``examples/EXAMPLE.yaml``, once ``until`` holds on it."""
    def shot(browser: Chromium, where: Path) -> Path:
        import shutil

        for helper in [*(ROOT / "examples").glob("*_fns.py"), ROOT / "examples" / "data"]:
            (shutil.copytree if helper.is_dir() else shutil.copy)(helper, where / helper.name)
        text = (ROOT / "examples" / f"{example}.yaml").read_text(encoding="utf-8")
        with GatedRun(where, spec=text) as run:  # (no gate in it: the run goes at once, and is kept alive)
            page = browser.open(run.url("/orchestrator/"), 1400, 900)
            page.wait_for(until, what)
            page.wait_for("document.body.innerText.split('\\n')[0].includes('finished')", "the run to finish")
            return page.screenshot(IMAGES / f"page-{example}.png", full_page=True)
    return shot


TRAIN_ENDED = ("(() => { const f = document.querySelector('[data-loop=\"fit\"]');"
               " return !!f && ['done', 'stopped'].includes(f.dataset.state); })()")
SEARCH_ENDED = ("[...document.querySelectorAll('[data-copy]')].length === 16 && [...document.querySelectorAll("
                "'[data-copy]')].every(r => ['done', 'stopped', 'failed'].includes(r.dataset.state))")
SHOTS: dict[str, Callable[[Chromium, Path], Path]] = {
    "report": report, "dask-status": dask_status,
    "page-train": run_page("train", TRAIN_ENDED, "the loop 'fit' to end"),
    "page-search": run_page("search", SEARCH_ENDED, "every copy of the sweep to end"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shots", nargs="*", metavar="SHOT", help=f"which pictures: {', '.join(SHOTS)} (default: all)")
    args = parser.parse_args(argv)
    unknown = [s for s in args.shots if s not in SHOTS]
    if unknown:
        parser.error(f"no picture named {', '.join(unknown)} (there are {', '.join(SHOTS)})")
    if find_chromium() is None:
        print(f"skipped: {NO_CHROMIUM}", file=sys.stderr)
        return 0
    with Chromium() as browser:
        for name in args.shots or list(SHOTS):
            with tempfile.TemporaryDirectory(prefix=f"screenshot-{name}-") as tmp:
                png = SHOTS[name](browser, Path(tmp))
                print(f"wrote {png.relative_to(ROOT)} ({png.stat().st_size} bytes) with {browser.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
