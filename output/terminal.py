"""What ddplab prints never drives the terminal (issue 25, D22), and the one control sequence it
does send, the progress line's "carriage return, erase line", has one spelling here.

Scenario names, descriptions, model names and values come from files anyone can write; a name
like ``"\\x1b[2J"`` printed raw cleared the screen, and others retitle the window or hide text.
Every write to stdout and stderr goes through ``EscapingStream``, which shows control characters
as ``\\x1b`` escapes. Newlines and tabs pass, and so does the one sequence ddplab itself sends:
the status line's "carriage return, erase line" prefix (workflow/progress.py), whose text after
the prefix is escaped like the rest.
"""

import re

ERASE_LINE = "\r\033[K"  # back to column 0, erase the line (workflow/progress.py's status lines)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # C0 but \t and \n, DEL, C1


def escape(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class EscapingStream:
    """A text stream that writes ``escape(text)`` to ``stream``; every other attribute is the
    stream's own (fileno, isatty, encoding: the BrokenPipe handling and colours checks use them)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        if text.startswith(ERASE_LINE):
            self._stream.write(ERASE_LINE + escape(text[len(ERASE_LINE) :]))
        else:
            self._stream.write(escape(text))
        return len(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def show(lines: list[str]) -> None:
    """Print the lines a workflow/ renderer returned, one each (none: nothing)."""
    for line in lines:
        print(line)
