"""From a file's bytes to text: bounded in size, strict UTF-8, only characters YAML allows.

Each refusal is a :class:`~orchestrator.errors.LoadError` with the place it
happened: libyaml would report a bad byte or character by its offset only.
"""

from __future__ import annotations

import codecs
import os
import re
from typing import NoReturn

from ...errors import format_bytes
from .problems import fail, text_position

MAX_SPEC_BYTES: int = 64 * 1024 * 1024
"""Files bigger than this are refused before they are read."""

# Characters YAML forbids in a stream (same set as PyYAML's reader). Checked up
# front so the error has an exact line and column: libyaml reports a byte offset.
_NON_PRINTABLE = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def read_bounded(path: str | os.PathLike[str], name: str) -> bytes:
    """Read the file, refusing too big ones by their size before reading them."""
    try:
        size = os.stat(path).st_size
        if size > MAX_SPEC_BYTES:
            refuse_size(size, name)
        with open(path, "rb") as handle:
            # Read one byte past the limit: stat lies for pipes and /proc files.
            raw = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        fail("io", name, f"cannot read file: {err.strerror or err}", "check the path")
    if len(raw) > MAX_SPEC_BYTES:
        refuse_size(len(raw), name)
    return raw


def refuse_size(size: int, file: str) -> NoReturn:
    fail(
        "too-large",
        file,
        f"file is {format_bytes(size)}; the limit is {format_bytes(MAX_SPEC_BYTES)}",
        "a spec this large is a mistake; split the data out of the spec",
    )


def decode(raw: bytes, file: str) -> str:
    """Strict UTF-8 (a leading BOM is dropped); a bad byte is reported with its position."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        # utf-8-sig decodes after the BOM, so its offsets are relative to it.
        bom = len(codecs.BOM_UTF8) if raw.startswith(codecs.BOM_UTF8) else 0
        offset = err.start + bom
        line = raw.count(b"\n", 0, offset) + 1
        line_start = max(raw.rfind(b"\n", 0, offset) + 1, bom)
        column = len(raw[line_start:offset].decode("utf-8", "replace")) + 1  # in characters
        fail(
            "encoding",
            file,
            f"file is not valid UTF-8 (byte 0x{raw[offset]:02x} at offset {offset})",
            "save the file as UTF-8",
            (line, column),
        )


def check_characters(text: str, file: str) -> None:
    match = _NON_PRINTABLE.search(text)
    if match is not None:
        code_point = ord(match.group())
        fail(
            "yaml-syntax",
            file,
            f"character U+{code_point:04X} is not allowed in YAML",
            f"remove it, or write it as the escape \\u{code_point:04x} inside double quotes",
            text_position(text, match.start()),
        )
