"""Text for the terminal. Every message the command line writes (errors, skip reports,
progress lines, warnings) passes through `terminal_safe`, because much of it quotes text the
user did not write: file names, model metadata, rollout fields, model output. A control or
format character (an ANSI escape, a carriage return, a bidi override) is shown as its
escape (`\\x1b`, `\\r`, `\\u202e`) instead of acting on the terminal, and a message stays one
line."""
from __future__ import annotations

import sys
import unicodedata
import warnings

# Control, format, line and paragraph separators, and lone surrogates (which no terminal
# encoding can write).
_ESCAPED = ("Cc", "Cf", "Zl", "Zp", "Cs")


def _escape(char: str) -> str:
    if unicodedata.category(char) not in _ESCAPED:
        return char
    return char.encode("unicode_escape", "backslashreplace").decode("ascii")


def terminal_safe(text) -> str:
    """`text` (any object, as str()) with each control or format character as its escape."""
    text = str(text)
    if text.isprintable():  # the common case: nothing to escape
        return text
    return "".join(map(_escape, text))


def say(text, file=None) -> None:
    """Write one message line to stderr (or `file`), made safe for the terminal."""
    print(terminal_safe(text), file=file or sys.stderr)


def show(text, file=None) -> None:
    """Write a block of lines (a summary, a table) to stdout (or `file`), each line made safe
    for the terminal: figures and labels read from a file reach it only this way."""
    for line in str(text).splitlines() or [""]:
        print(terminal_safe(line), file=file or sys.stdout)
    (file or sys.stdout).flush()


def _safe_formatwarning(message, category, filename, lineno, line=None) -> str:
    return _formatwarning(terminal_safe(message), category, terminal_safe(filename), lineno, line)


_formatwarning = warnings.formatwarning


def safe_warnings() -> None:
    """Format every warning's message and file name with `terminal_safe` from now on."""
    warnings.formatwarning = _safe_formatwarning
