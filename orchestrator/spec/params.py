"""Parameters: a typed ``params:`` block, ``${params.NAME}`` wherever a value is written, ``--set`` overrides.

Policy. Substitution is the first thing done to a loaded document, before the
schema and every other check, so a parameter's value is checked where it is
used exactly as if it had been written there, and each diagnostic about it
points at the use (its file, line and column). A use that is the whole value
(``scalar: ${params.lr}``) takes the parameter's typed value; a use inside text
(``path: results/${params.run}.npy``) its text. ``$${`` writes a literal
``${``. Overrides come from the command line as text and are read as YAML
reads a value in a spec (``--set lr=1e-3`` is a float, ``--set sizes=[2, 4]``
a list); a ``string`` parameter keeps the text as typed (``--set tag=007``).

Every problem is collected: a declaration that is not one, a default of the
wrong type, an override of an undeclared name or of the wrong type (reported at
each use, naming the override and the declaration), a use of an undeclared name
(with "did you mean"), a parameter without a value. A parameter declared and
never used is a warning. Diagnostics found later at a substituted value (the
schema's, the graph's) say which parameter and override put it there
(:func:`explain`).

State: none. Pure functions from a document and overrides to a new document.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import Diagnostic, YamlPath, did_you_mean
from .load import parse_value
from .records import Document, Param

_TYPES: dict[str, tuple[Callable[[Any], bool], str, str]] = {  # type -> (check, what it is, an example)
    "number": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number", "0.01"),
    "integer": (lambda v: isinstance(v, int) and not isinstance(v, bool), "a whole number", "10"),
    "string": (lambda v: isinstance(v, str), "text", "name"),
    "boolean": (lambda v: isinstance(v, bool), "true or false", "true"),
    "list": (lambda v: isinstance(v, list), "a list", "[1, 2]"),
}
_FIELDS = ("type", "default", "description", "choices")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# the last alternative: a '${' that no '}' closes, so it cannot stay in a value as text
_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
_USE = re.compile(r"\s*params\.([A-Za-z0-9_]*)\s*\Z")
_COPY = re.compile(r"\s*copy\.[A-Za-z0-9_]+\s*\Z")  # a sweep's per-copy value: its expansion replaces it


@dataclass(frozen=True)
class Resolved:
    """A document with every ``${params.NAME}`` replaced, the effective parameters and the diagnostics."""

    document: Document
    params: tuple[Param, ...] = ()
    diagnostics: tuple[Diagnostic, ...] = ()
    # where a value was substituted -> what put it there ("${params.lr} = 0.5, from --set lr=0.5")
    origins: Mapping[YamlPath, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)


def describe(value: Any) -> str:
    """A value as the user would write it: ``0.01``, ``true``, ``'abc'`` (text quoted), ``[1, 2]``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if value is None:
        return "null"
    return str(value)


def _text(value: Any) -> str:
    return describe(value) if not isinstance(value, str) else value


def _reference_in(value: Any, path: YamlPath = ()) -> tuple[YamlPath, str] | None:
    """Where a value (or an item of a list of them) holds a ``${...}`` (``$${`` apart), and that text."""
    if isinstance(value, list):
        return next((found for i, item in enumerate(value) if (found := _reference_in(item, (*path, i)))), None)
    if isinstance(value, str) and any(use.group(0) != "$${" for use in _REFERENCE.finditer(value)):
        return path, value
    return None


def _kind_of(value: Any) -> str:
    """What a value is, in the words the declared types use (a bool is checked before the numbers it also is)."""
    for name in ("boolean", "integer", "number", "string", "list"):
        check, what, _ = _TYPES[name]
        if check(value):
            return what
    return "a mapping" if isinstance(value, dict) else "null" if value is None else type(value).__name__


class _Resolver:
    def __init__(self, doc: Document, overrides: Mapping[str, Any]):
        self.doc = doc
        self.overrides = overrides
        self.diags: list[Diagnostic] = []
        self.declared: dict[str, dict[str, Any]] = {}
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.bad: dict[str, str] = {}  # name -> why its value cannot be used (said at each use)
        self.bad_hints: dict[str, str] = {}
        self.broken: set[str] = set()  # declared wrongly: said at the declaration, uses stay quiet
        self.used: set[str] = set()
        self.origins: dict[YamlPath, str] = {}

    def error(self, code: str, path: YamlPath, message: str, hint: str, key: bool = False) -> None:
        self.diags.append(self.doc.diagnostic(code, path, message, hint, "error", key))

    def where(self, name: str) -> str:
        line, column = self.doc.locate(("params", name), True)
        return f"{self.doc.file}:{line}:{column}"

    # ------------------------------------------------------------------ the block

    def declarations(self, block: Any) -> None:
        if block is None:
            return
        if not isinstance(block, dict):
            self.error("params", ("params",), f"params must be a mapping of names to declarations, got "
                       f"{_kind_of(block)}", "e.g. params: {lr: {type: number, default: 0.1}}")
            return
        for name, decl in block.items():
            path: YamlPath = ("params", name)
            if not isinstance(name, str) or not _NAME.match(name):
                self.error("params", path, f"parameter name {describe(name)} is not a name",
                           "letters, digits and _, not starting with a digit: e.g. lr, batch_size", key=True)
                continue
            if not isinstance(decl, dict):
                self.error("params", path, f"parameter '{name}' must be declared as a mapping, got {_kind_of(decl)}",
                           f"e.g. {name}: {{type: number, default: {describe(decl) if decl is not None else 0.1}}}")
                continue
            self.declaration(name, decl, path)

    def declaration(self, name: str, decl: dict[str, Any], path: YamlPath) -> None:
        ok = True
        for key in decl:
            if key not in _FIELDS:
                close = did_you_mean(str(key), _FIELDS)
                self.error("params", (*path, key), f"unknown key {describe(key)} in parameter '{name}'",
                           close or f"a parameter has {', '.join(_FIELDS)}", key=True)
                ok = False
        kind = decl.get("type")
        if not isinstance(kind, str) or kind not in _TYPES:
            if "type" not in decl:
                message, hint = f"parameter '{name}' has no type", f"add type: one of {', '.join(_TYPES)}"
            else:
                message = f"unknown parameter type {describe(kind)}"
                hint = did_you_mean(str(kind), _TYPES) or f"one of {', '.join(_TYPES)}"
            self.error("params", (*path, "type") if "type" in decl else path, message, hint)
            self.broken.add(name)
            return
        check, what, example = _TYPES[kind]
        if "description" in decl and not isinstance(decl["description"], str):
            self.error("params", (*path, "description"), "a description is text", "quote it")
            ok = False
        choices = decl.get("choices")
        if "choices" in decl:
            if not isinstance(choices, list) or not choices:
                self.error("params", (*path, "choices"), "choices must be a non-empty list of values",
                           f"e.g. choices: [{example}]")
                ok = False
            else:
                for i, choice in enumerate(choices):
                    if not check(choice):
                        self.error("params", (*path, "choices", i), f"choice {describe(choice)} of parameter "
                                   f"'{name}' is {_kind_of(choice)}, not {what}", f"parameter '{name}' is {kind}")
                        ok = False
        if "default" in decl:
            default = decl["default"]
            if not check(default):
                self.error("params", (*path, "default"), f"the default of parameter '{name}' is {_kind_of(default)}, "
                           f"but its type is {kind}", f"write {what}, e.g. default: {example}")
                ok = False
            elif isinstance(choices, list) and choices and default not in choices:
                self.error("params", (*path, "default"), f"the default {describe(default)} of parameter '{name}' is "
                           f"not one of its choices", f"one of {', '.join(describe(c) for c in choices)}")
                ok = False
        ok = ok and self.no_uses(name, decl)
        self.declared[name] = decl
        if ok and "default" in decl:
            self.values[name], self.sources[name] = decl["default"], "default"
        elif not ok:
            self.broken.add(name)

    def no_uses(self, name: str, decl: dict[str, Any]) -> bool:
        """Nothing in ``params:`` is substituted: a ``${...}`` there would reach a value as written."""
        for key, what in (("default", "the default"), ("choices", "a choice")):
            found = _reference_in(decl.get(key), ("params", name, key))
            if found is not None:
                self.error("param-in-params", found[0], f"{what} of parameter '{name}' is {found[1]!r}, but nothing "
                           f"inside params: is substituted", f"write the value itself: {what} cannot use a parameter")
                return False
        return True

    # ------------------------------------------------------------------ --set

    def apply_overrides(self) -> None:
        where: YamlPath = ("params",) if "params" in self.doc.data else ()
        for name, raw in self.overrides.items():
            setting = f"--set {name}={_text(raw)}"
            if name in self.broken:
                continue
            if name not in self.declared:
                close = did_you_mean(name, self.declared)
                known = f"the spec's parameters: {', '.join(sorted(self.declared))}" if self.declared else \
                    f"declare it: params: {{{name}: {{type: number, default: 0.1}}}}"
                self.error("param-unknown", where, f"{setting}: the spec has no parameter '{name}'",
                           close or known, key=bool(where))
                continue
            kind = self.declared[name]["type"]
            check, what, example = _TYPES[kind]
            if isinstance(raw, str):
                try:
                    value = raw if kind == "string" else parse_value(raw)
                except ValueError as exc:
                    self.bad[name] = f"{setting} is not a value ({exc})"
                    self.hint_for_bad(name, f"write {what}, e.g. --set {name}={example}")
                    continue
            else:
                value = raw
            if _reference_in(value) is not None:  # substituted once, as text: it would reach the value as written
                self.bad[name] = f"{setting}: a --set value is not substituted, and '${{' cannot stay in it"
                self.hint_for_bad(name, f"write the value itself, e.g. --set {name}={example}")
                continue
            if not check(value):
                self.bad[name] = f"parameter '{name}' is {kind}, but {setting} gives {_kind_of(value)}"
                self.hint_for_bad(name, f"write {what}, e.g. --set {name}={example}; '{name}' is declared at "
                                        f"{self.where(name)}")
                continue
            choices = self.declared[name].get("choices")
            if isinstance(choices, list) and choices and value not in choices:
                self.bad[name] = f"{setting}: {describe(value)} is not one of the choices of parameter '{name}'"
                self.hint_for_bad(name, f"one of {', '.join(describe(c) for c in choices)}")
                continue
            self.values[name], self.sources[name] = value, f"--set {name}={_text(raw)}"
        for name, decl in self.declared.items():
            if name not in self.values and name not in self.bad and name not in self.broken:
                self.error("param-no-value", ("params", name), f"parameter '{name}' has no default and no --set",
                           f"pass --set {name}={_TYPES[decl['type']][2]}, or give it a default", key=True)

    def hint_for_bad(self, name: str, hint: str) -> None:
        self.bad_hints[name] = hint

    # ------------------------------------------------------------------ uses

    def substitute(self, value: Any, path: YamlPath) -> Any:
        """``value`` with its uses replaced (the same object when there were none)."""
        if isinstance(value, str):
            return self.substitute_text(value, path) if "${" in value else value
        if isinstance(value, dict):
            changed = {k: self.substitute(v, (*path, k)) for k, v in value.items()}
            return value if all(changed[k] is value[k] for k in value) else changed
        if isinstance(value, list):
            items = [self.substitute(v, (*path, i)) for i, v in enumerate(value)]
            return value if all(a is b for a, b in zip(items, value)) else items
        return value

    def substitute_text(self, text: str, path: YamlPath) -> Any:
        uses = list(_REFERENCE.finditer(text))
        whole = len(uses) == 1 and uses[0].group(0) != "$${" and uses[0].span() == (0, len(text))
        parts: list[str] = []
        at = 0
        said: list[str] = []
        for use in uses:
            parts.append(text[at:use.start()])
            at = use.end()
            if use.group(0) == "$${":
                parts.append("${")
                continue
            if use.group(1) is not None and _COPY.match(use.group(1)):
                parts.append(use.group(0))
                continue
            if use.group(1) is None:
                self.error("param-syntax", path, f"'${{' without a closing '}}' in {text!r}",
                           "close it: ${params.NAME}; a literal '${' is written $${")
                return text
            name = self.use(use.group(0), use.group(1), path)
            if name is None:
                return text
            value = self.values[name]
            said.append(f"${{params.{name}}} = {describe(value)}, from {self.source_words(name)}")
            if whole:
                self.origins[path] = said[0]
                return value
            if isinstance(value, list):
                self.error("param-in-text", path, f"parameter '{name}' is a list and cannot be part of text "
                           f"({text!r})", f"use it as the whole value: ${{params.{name}}}")
                return text
            parts.append(_text(value))
        parts.append(text[at:])
        if said:
            self.origins[path] = "; ".join(said)
        return "".join(parts)

    def use(self, written: str, inside: str, path: YamlPath) -> str | None:
        """The parameter a ``${...}`` names, when it can be used here; else None, with an error."""
        match = _USE.match(inside)
        if match is None:
            self.error("param-syntax", path, f"{written} is not a parameter reference",
                       "write ${params.NAME}; a literal '${' is written $${")
            return None
        name = match.group(1)
        self.used.add(name)
        if name in self.broken:
            return None
        if name in self.bad:
            self.error("param-value", path, self.bad[name], self.bad_hints.get(name, ""))
            return None
        if name not in self.declared:
            close = did_you_mean(name, self.declared)
            self.error("param-unknown", path, f"{written}: no parameter '{name}' is declared",
                       close or f"declare it under params:, e.g. params: {{{name or 'lr'}: {{type: number, "
                                f"default: 0.1}}}}")
            return None
        if name not in self.values:
            return None  # no value: said once, at its declaration
        return name

    def source_words(self, name: str) -> str:
        return self.sources[name] if self.sources[name] != "default" else "its default"

    def unused(self) -> None:
        for name in self.declared:
            if name not in self.used:
                self.diags.append(self.doc.diagnostic(
                    "param-unused", ("params", name), f"parameter '{name}' is declared but never used",
                    f"use it as ${{params.{name}}}, or remove it", "warning", True))
        for name in self.bad:  # a bad value no use reported: say it at the declaration
            if name not in self.used and name in self.declared:
                self.error("param-value", ("params", name), self.bad[name],
                           self.bad_hints.get(name, ""), key=True)


def resolve_params(doc: Document, overrides: Mapping[str, Any] | None = None) -> Resolved:
    """Substitute every ``${params.NAME}`` of ``doc``; ``overrides``: ``--set`` values (text, read as YAML)."""
    overrides = overrides or {}
    resolver = _Resolver(doc, overrides)
    data = doc.data
    resolver.declarations(data.get("params"))
    if not resolver.diags:
        resolver.apply_overrides()
    new_data = {key: value if key == "params" else resolver.substitute(value, (key,)) for key, value in data.items()}
    if not any(d.is_error for d in resolver.diags):
        resolver.unused()
    params = tuple(Param(name, str(decl["type"]), resolver.values[name], resolver.sources[name],
                         str(decl.get("description", "")))
                   for name, decl in resolver.declared.items() if name in resolver.values)
    changed = any(new_data[k] is not data[k] for k in data)
    document = replace(doc, data=new_data) if changed else doc
    return Resolved(document, params, tuple(resolver.diags), resolver.origins)


def explain(diagnostics: list[Diagnostic], origins: Mapping[YamlPath, str]) -> list[Diagnostic]:
    """Diagnostics at (or inside) a substituted value say which parameter and override put it there."""
    if not origins:
        return diagnostics
    out = []
    for d in diagnostics:
        origin = next((origins[d.path[:n]] for n in range(len(d.path), 0, -1) if d.path[:n] in origins), None)
        out.append(replace(d, hint=f"{d.hint}; {origin}" if d.hint else origin) if origin else d)
    return out


__all__ = ["Resolved", "describe", "explain", "resolve_params"]
