"""Files a run reads and writes: formats (from the formats registry), paths, ranks.

The spec's ``outputs`` and every op that declares files (``reads`` /
``writes`` in the op catalog: ``load``, ``save``) are checked here, so a run
never fails after computing everything because of a file it cannot write.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping, Sequence

from ... import formats
from ...errors import YamlPath, did_you_mean
from ...ops.values import ValueInfo
from ...paths import safe_name
from ..records import Loop, Op, OpRef, Output, RunOptions, Search
from ...ops import lookup
from .checker import Checker
from .graph import check_ref, fmt_shape, label


def _format_of(c: Checker, target: str, path: YamlPath, what: str, named: str | None,
               usable: Callable[[formats.FileFormat], bool], stdout: bool = False) -> formats.FileFormat | None:
    """The format a file is read or written in; a diagnostic and None when there is no usable one."""
    code = "output-format" if what != "load path" else "load-format"
    if named is not None and named not in formats.FORMATS:
        usable_names = [name for name, f in formats.FORMATS.items() if usable(f)]
        c.error(code, (*path[:-1], "format"), f"unknown file format '{named}'",
                did_you_mean(named, usable_names) or f"formats: {', '.join(usable_names)}")
        return None
    fmt = formats.chosen(target, named)
    if fmt is not None and usable(fmt):
        return fmt
    allowed = formats.suffixes(usable)
    hint = f"use {', '.join(allowed)}" + (" or '-' for stdout" if stdout else "")
    if fmt is None:
        c.error(code, path, f"{what} '{target}' has an unknown format", hint)
    else:
        c.error(code, path, f"{what} '{target}' is a {fmt.name} file, which "
                f"{'load' if what == 'load path' else 'save'} cannot use", hint)
    return None


def check_target(c: Checker, target: str, path: YamlPath, run: RunOptions, what: str) -> bool:
    """A file the run writes stays inside the output directory unless allowed out. True if fine."""
    if os.path.isabs(target) and not run.allow_absolute_paths:
        c.error("output-path", path, f"{what} '{target}' is absolute",
                "use a path relative to the output directory, or set run.allow_absolute_paths: true")
    elif ".." in os.path.normpath(target).split(os.sep) and not run.allow_absolute_paths:
        c.error("output-path", path, f"{what} '{target}' escapes the output directory",
                "remove '..' or set run.allow_absolute_paths: true")
    else:
        return True
    return False


def check_named(c: Checker, fmt: formats.FileFormat, target: str, path: YamlPath, what: str, name: str) -> bool:
    """A file written needs a name before its suffix: ``results/.npy`` is a hidden file nobody asked for
    (often an empty ``--set``). True if fine."""
    base = os.path.basename(target)
    suffix = next((s for s in fmt.suffixes if base.lower().endswith(s)), "")
    if base[:len(base) - len(suffix)].strip():
        return True
    folder = os.path.dirname(target)
    example = os.path.join(folder, name.replace("/", "-") + (suffix or fmt.suffixes[0]))
    c.error("output-path", path, f"{what} '{target}' has no file name" + (f" before '{suffix}'" if suffix else ""),
            f"name the file, e.g. {example}")
    return False


def _info(values: Mapping[str, tuple[ValueInfo, ...]], ref: OpRef) -> ValueInfo | None:
    infos = values.get(ref.op, ())
    index = ref.output or 0
    return infos[index] if index < len(infos) else None


def _check_rank(c: Checker, fmt: formats.FileFormat, info: ValueInfo | None, path: YamlPath, what: str) -> None:
    """A format that holds a table: the run would fail after computing everything."""
    if fmt.max_ndim is not None and info is not None and info.shape is not None and len(info.shape) > fmt.max_ndim:
        c.error("output-format", path, f"{what} shape {fmt_shape(info.shape)}; a {fmt.name.upper()} file holds at "
                f"most {fmt.max_ndim} dimensions", f"write it to .npy, or reshape it to {fmt.max_ndim} dimensions first")


def check_outputs(c: Checker, data: Mapping[str, Any], by_name: Mapping[str, Op], run: RunOptions,
                  values: Mapping[str, tuple[ValueInfo, ...]], searches: Sequence[Search] = (),
                  loops: Sequence[Loop] = ()) -> tuple[Output, ...]:
    out = []
    names = list(by_name)
    files = _Files(c, run)
    for key, target in (data.get("outputs") or {}).items():
        path = ("outputs", key)
        ref = OpRef.parse(str(key))
        check_ref(c, ref, by_name, names, path, f"op '{ref}' named in outputs", key=True)
        if target != "-":
            fmt = _format_of(c, str(target), path, "output path", None, lambda f: True, stdout=True)
            if fmt is not None and check_target(c, str(target), path, run, "output path") and \
                    check_named(c, fmt, str(target), path, "output path", str(ref)):
                _check_rank(c, fmt, _info(values, ref), path, f"output '{ref}' has")
                files.written(str(target), path, "output path", f"output '{ref}'")
        out.append(Output(ref, str(target), path))
    copies: dict[YamlPath, list[Op]] = {}
    for op in by_name.values():
        copies.setdefault(op.path, []).append(op)  # an op in a replicated body is one line of YAML
    for ops in copies.values():
        op = ops[0]
        definition = lookup(op.kind)
        if definition is None:
            continue
        for param in definition.reads:
            if param in op.params:
                _format_of(c, str(op.params[param]), (*op.path, param), "load path", op.params.get("format"),
                           lambda f: f.read is not None)
                files.read(str(op.params[param]), label(op))
    for ops in copies.values():  # after every read is known: a save may not overwrite a file any op loads
        op = ops[0]
        definition = lookup(op.kind)
        if definition is None:
            continue
        for param in definition.writes:
            if param in op.params:
                target, where = str(op.params[param]), (*op.path, param)
                fmt = _format_of(c, target, where, "save path", op.params.get("format"), lambda f: f.saveable)
                if fmt is not None and check_target(c, target, where, run, "save path") and \
                        check_named(c, fmt, target, where, "save path", op.name) and op.inputs:
                    _check_rank(c, fmt, _info(values, op.inputs[0]), where, f"op {label(op)} saves")
                    if len(ops) > 1 and op.group is not None:
                        c.error("output-path", where, f"save path '{target}' is written by each of the {len(ops)} "
                                f"copies of '{op.group}'", "save the combined value outside the body instead")
                    files.written(target, where, "save path", f"op {label(op)}")
    out.extend(_tables(c, searches, by_name, values, files, run))
    _checkpoint_paths(c, loops, files, run)
    return tuple(out)


def _checkpoint_paths(c: Checker, loops: Sequence[Loop], files: _Files, run: RunOptions) -> None:
    """A loop's ``checkpoint.path`` is a folder the run writes under the output directory, as outputs are:
    not outside it, not the spec or a file it reads, not a file an output or a save writes."""
    seen: set[YamlPath] = set()
    for loop in loops:
        if loop.checkpoint is None or loop.checkpoint.path is None:
            continue
        where = (*loop.path, "checkpoint", "path")
        if where in seen:  # the copies of a sweep's loop: one line of YAML, said once
            continue
        seen.add(where)
        target = loop.checkpoint.path
        if check_target(c, target, where, run, "checkpoint path"):
            files.folder(target, where, f"checkpoint path '{target}' (loop '{loop.name}')", safe_name(loop.name))


def _tables(c: Checker, searches: Sequence[Search], by_name: Mapping[str, Op],
            values: Mapping[str, tuple[ValueInfo, ...]], files: _Files, run: RunOptions) -> list[Output]:
    """Each sweep's ``table:``: a CSV file the run writes, of one number per copy and metric."""
    out = []
    for search in searches:
        table, name = search.table, f"{search.name}.table"
        if table is None or name not in by_name:
            continue
        where = (*table.at, "path")
        if not (check_target(c, table.path, where, run, "table path") and
                check_named(c, formats.FORMATS["csv"], table.path, where, "table path", search.name)):
            continue
        shape = values.get(name, (ValueInfo(None, None),))[0].shape
        wanted = (len(search.copies) * len(table.metrics),)
        if shape is not None and tuple(shape) != wanted:
            c.error("table-metric", (*table.at, "metrics"), f"the table of sweep '{search.name}' holds one number per "
                    f"copy and metric, but its metrics are not all scalars ({len(search.copies)} copies x "
                    f"{len(table.metrics)} metrics make {fmt_shape(tuple(shape))})",
                    "name scalar body ops (reduce an array with op: mean or sum), or gather: it instead")
            continue
        files.written(table.path, where, "table path", f"the table of sweep '{search.name}'")
        out.append(Output(OpRef(name), table.path, where))
    return out


class _Files:
    """The files a run reads and writes, as paths on disk: no file is written twice, nor over an input."""

    def __init__(self, c: Checker, run: RunOptions):
        self.c = c
        base = os.path.abspath(c.doc.directory)
        self.out_dir = os.path.join(base, run.output_dir or ".")
        self.base = base
        spec = os.path.join(base, os.path.basename(c.doc.file))
        self.inputs: dict[str, str] = {os.path.realpath(spec): "the spec itself"} if os.path.isfile(spec) else {}
        self.outputs: dict[str, tuple[str, YamlPath]] = {}

    def read(self, target: str, who: str) -> None:
        self.inputs.setdefault(os.path.realpath(os.path.join(self.base, target)), f"the file {who} loads")

    def folder(self, target: str, path: YamlPath, what: str, loop: str) -> None:
        """A folder the run writes files into (a loop's checkpoints: ``<target>/<loop>/``)."""
        resolved = os.path.realpath(os.path.join(self.out_dir, target))
        for folder in (resolved, os.path.join(resolved, loop)):
            written = self.outputs.get(folder)
            if written is not None:
                line = self.c.doc.locate(written[1])[0]
                self.c.error("checkpoint-path", path, f"{what} is the file {written[0]} writes (line {line}): the "
                             "run would make a folder of it", "give the checkpoints a folder of their own, e.g. "
                             f"{os.path.join(os.path.dirname(target) or '.', 'checkpoints')}")
                return
            read = self.inputs.get(folder)
            if read is not None:
                self.c.error("checkpoint-path", path, f"{what} is {read}", "give the checkpoints a folder of their "
                             "own, e.g. checkpoints")
                return
        existing = os.path.join(resolved, loop)
        while not os.path.exists(existing) and os.path.dirname(existing) != existing:
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            self.c.error("checkpoint-path", path, f"{what} cannot be a folder: "
                         f"{os.path.relpath(existing, self.out_dir)} is a file", "choose a path whose folders are "
                         "directories, or do not exist yet")

    def written(self, target: str, path: YamlPath, what: str, who: str) -> None:
        resolved = os.path.realpath(os.path.join(self.out_dir, target))
        first = self.outputs.get(resolved)
        if first is not None:
            line = self.c.doc.locate(first[1])[0]
            self.c.error("output-path", path, f"{what} '{target}' is also written by {first[0]} (line {line})",
                         "give each output and checkpoint a file of its own")
            return
        self.outputs[resolved] = (who, path)
        overwritten = self.inputs.get(resolved)
        if overwritten is not None:
            self.c.error("output-path", path, f"{what} '{target}' is {overwritten}: the run would overwrite it",
                         "write the result to another file")
            return
        parent = os.path.dirname(resolved)
        while parent and not os.path.exists(parent):
            parent = os.path.dirname(parent)
        if parent and not os.path.isdir(parent):
            self.c.error("output-path", path, f"{what} '{target}' cannot be written: "
                         f"{os.path.relpath(parent, self.out_dir)} is a file, not a directory",
                         "choose a path whose folders are directories, or do not exist yet")
