"""The page around the pictures: its header of facts, its tables of rule decisions, devices and ops, its template.

How to read each picture is on the picture itself (legends, and the hover of each bar, line and mark), not in
paragraphs above it.

:func:`run_report_html` is ``orchestrate report RUN.json --html OUT.html``:
the checked view of the report (:mod:`.view`), drawn (:mod:`.figures`) into
the template here, which puts the header above the pictures and the tables
below them.
"""

from __future__ import annotations

import html
import os
from collections import defaultdict
from typing import Any, Mapping

from ...errors import format_bytes
from .figures import page_html
from .lanes import time_zero
from .search import decision_table
from .steps import TRANSPORT_SENTENCES
from .view import RunView, parse_run_report, read_run_report
from .words import HOST_NOT_MEASURED, plural, seconds, short_device, size_or_unknown

PAGE_WIDTH = 1280


def run_report_html(data: Mapping[str, Any], source: str = "the run report") -> str:
    """The page of a run report's JSON: header, timeline, memory and tables, all resources inline."""
    view = parse_run_report(data, source)
    return page_html(view, _TEMPLATE, {"header_html": _header(view, source), "tables_html": _tables(view)})


def render_run_report_file(path: str | os.PathLike[str]) -> str:
    """Read a run report file and return its HTML page."""
    return run_report_html(read_run_report(path), os.fspath(path))


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _header(view: RunView, source: str) -> str:
    t = view.totals
    exchanged = t.get("bytes_exchanged", 0)
    dask_moved = max(t.get("bytes_moved", 0) - exchanged, 0)
    facts = [
        ("spec", f"{_e(view.file or '-')} (run {_e(view.run or '-')})"),
        ("backend", _e(view.backend)),
        ("granularity", _e(view.granularity) + (" (a Dask task per device partition; loops per device and window)"
                                                 if view.granularity == "partition" else " (a Dask task per op)")),
        ("task names", f"{_e(view.naming or '-')}" + (f" ({_e(view.naming_why)})" if view.naming_why else "")),
        ("elapsed", _e(seconds(view.elapsed)) + (f" (after {_e(seconds(view.startup))} of start-up: cluster and "
                                                 "device workers)" if view.startup else "")),
        ("phases", ", ".join(f"{_e(k)} {_e(seconds(v))}" for k, v in view.phases) or "-"),
        ("totals", _e(f"{plural(t.get('ops', len(view.ops)), 'op')} in {plural(t.get('tasks', 0), 'Dask task')}; "
                      f"{plural(t.get('moves', 0), 'planned transfer')}; Dask moved {format_bytes(dask_moved)} in "
                      f"{plural(t.get('transfers_seen', len(view.transfers)), 'transfer')}"
                      + (f"; loop windows sent {format_bytes(exchanged)} worker to worker" if exchanged else ""))),
        ("loops", "<br>".join(f"<b>{_e(k)}</b>: {_e(v)}" for k, v in view.loops) or "none"),
    ]
    if view.transport:
        facts.append(("loop transport", _e(TRANSPORT_SENTENCES.get(view.transport, view.transport))))
    if view.restarted:
        facts.append(("restarted devices", _e(", ".join(view.restarted))))
    if view.unverified:
        facts.append(("unverified ops", _e(", ".join(view.unverified)) + " (their records died with a restarted "
                                                                          "worker)"))
    rows = "\n".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts)
    return (f'<header><h1>Run of <code>{_e(view.name)}</code></h1>'
            f'<p class="source">report: {_e(source)}</p>\n<table class="facts">\n{rows}\n</table>\n'
            "</header>")


def _tables(view: RunView) -> str:
    origin = time_zero(view)
    busy: dict[str, float] = defaultdict(float)
    for o in view.ops:
        busy[o.device] += o.duration or 0.0
    device_rows = []
    for d in view.devices:
        seen = (format_bytes(d.peak_bytes_seen) if d.peak_bytes_seen is not None
                else HOST_NOT_MEASURED if d.backend == "host" else "not measured")
        device_rows.append(
            f"<tr><td><code>{_e(d.device)}</code></td><td>{_e(d.backend or '-')}</td><td class=n>{d.ops}</td>"
            f"<td class=n>{_e(seconds(busy[d.device]))}</td><td class=n>{_e(size_or_unknown(d.planned_peak_bytes))}</td>"
            f"<td class=n>{_e(seen)}</td>"
            f"<td class=n>{_e(format_bytes(d.limit_bytes) if d.limit_bytes is not None else 'no limit')}</td></tr>")
    op_rows = []
    for o in view.ops:
        moved = "" if o.device == o.planned_device else f" (planned {_e(o.planned_device)})"
        op_rows.append(
            f"<tr><td><code>{_e(o.name)}</code></td><td>{_e(o.kind)}</td><td><code>{_e(short_device(o.device))}"
            f"</code>{moved}</td><td class=n>{_e(o.runs if o.runs is not None else '-')}</td>"
            f"<td class=n>{_e('+' + seconds(o.start - origin) if o.start is not None else '-')}</td>"
            f"<td class=n>{_e(seconds(o.duration) if o.duration is not None else '-')}</td>"
            f"<td class=n>{_e(size_or_unknown(o.output_bytes) if o.output_bytes is not None else '-')}</td>"
            f"<td>{_e(o.note or o.why)}</td></tr>")
    return ("<section>" + "".join(decision_table(sweep) for sweep in view.sweeps) + "<h2>Devices</h2><table class=grid><tr><th>device</th><th>backend</th><th>ops</th>"
            "<th>busy (op time summed)</th><th>planned peak</th><th>peak seen</th><th>limit</th></tr>\n"
            + "\n".join(device_rows) + "</table>"
            "<h2>Ops</h2><table class=grid><tr><th>op</th><th>kind</th><th>device</th><th>runs</th>"
            "<th>(first) start</th><th>duration (summed over runs)</th><th>output</th><th>why here</th></tr>\n"
            + "\n".join(op_rows) + "</table></section>")


_STYLE = """
<style>
  body { font: 14px/1.45 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #222;
         margin: 0 auto; padding: 16px 24px; max-width: %(width)dpx; height: auto; }
  h1 { font-size: 22px; margin: 0 0 2px; } h2 { font-size: 16px; margin: 22px 0 6px; }
  .source { color: #666; margin: 0 0 8px; font-size: 12px; }
  table.facts th { text-align: left; padding: 1px 14px 1px 0; color: #555; font-weight: 600;
                   vertical-align: top; white-space: nowrap; }
  table.facts td { padding: 1px 0; }
  table.grid { border-collapse: collapse; font-size: 12.5px; }
  table.grid th, table.grid td { border-bottom: 1px solid #e3e3e3; padding: 3px 10px 3px 0; text-align: left; }
  table.grid td.n { text-align: right; font-variant-numeric: tabular-nums; }
  code { font-size: 12px; }
  table.decisions td.stopped { color: #999; } table.decisions td.kept { color: #222; }
</style>
""" % {"width": PAGE_WIDTH + 40}

# bokeh's page template (bokeh prepends "{% extends base %}"): our CSS in the head after bokeh's (which sets
# the body's margins to 0 and its height to 100%), the header above
# the pictures and the tables below them.
_TEMPLATE = """
{% block postamble %}""" + _STYLE + """{% endblock %}
{% block contents %}
{{ header_html | safe }}
{{ super() }}
{{ tables_html | safe }}
{% endblock %}
"""
