"""Everything the command line shows: tables, notes, errors, JSON and progress.

Results go to stdout (``--json``: one JSON document only); notes, progress and errors to
stderr. On a terminal rich (``cli`` extra) draws tables and a live bar; elsewhere plain
aligned tables and a throttled progress line per step.
"""

from __future__ import annotations

import itertools
import shutil
import sys
import textwrap
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import IO, Any

from .._contract._validation import json_text

try:  # the optional ``cli`` extra; without it everything is plain text
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as RichProgress
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text
except ImportError:
    _RICH = False
else:
    _RICH = True


def rich_available() -> bool:
    """Whether the optional ``rich`` package is installed."""
    return _RICH


def printable(text: str, *, keep: str = "\n\t") -> str:
    r"""``text`` with every control or format character escaped (``\x1b``), except ``keep``.

    Keys, ids, prompts and error messages come from users and from the service; shown raw, an
    ESC or BEL in one would drive the terminal (``--json`` escapes them in JSON's way).
    """
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() or c in keep else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


def _console(stream: IO[str]) -> Console:
    """A rich console on a terminal (where rich draws), highlighting nothing by itself."""
    return Console(file=stream, force_terminal=True, highlight=False)


def _is_tty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class UI:
    """The command line's output (``json_mode``: stdout carries JSON only; rich if wanted)."""

    def __init__(
        self,
        *,
        json_mode: bool = False,
        debug: bool = False,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
    ) -> None:
        self.json_mode = json_mode
        self.debug = debug
        self.out = stdout if stdout is not None else sys.stdout
        self.err = stderr if stderr is not None else sys.stderr
        self.rich = rich_available()
        self.out_tty = _is_tty(self.out)
        #: rich draws the results on a terminal (not in ``--json`` mode), and a live progress
        #: bar on a terminal's stderr; ``None`` where the output is plain text.
        self.out_console = (
            _console(self.out) if self.rich and self.out_tty and not json_mode else None
        )
        self.err_console = _console(self.err) if self.rich and _is_tty(self.err) else None

    def _say(self, text: str, console: Console | None, stream: IO[str]) -> None:
        """A line on rich's ``console`` (when not ``None``), else as plain text on ``stream``."""
        if console is None:
            print(printable(text), file=stream, flush=True)
        else:
            console.print(printable(text), markup=False)

    def print(self, text: str = "") -> None:
        """A line of human output on stdout (nothing in ``--json`` mode)."""
        if not self.json_mode:
            self._say(text, self.out_console, self.out)

    def heading(self, text: str) -> None:
        """A section title on stdout (human mode)."""
        if self.out_console is not None:
            self.out_console.print(Rule(printable(text), align="left"))
        else:
            self.print(f"\n== {text} ==")

    def note(self, text: str) -> None:
        """A side note on stderr (shown in ``--json`` mode too: it is not on stdout)."""
        self._say(text, self.err_console, self.err)

    def warn(self, text: str) -> None:
        """A warning on stderr."""
        self.note(f"warning: {text}")

    def error(self, text: str) -> None:
        """An error line on stderr."""
        print(f"videogen: error: {printable(text)}", file=self.err, flush=True)

    def emit_json(self, data: Any) -> None:
        """One JSON document on stdout."""
        print(
            json_text(data, "", indent=2, ensure_ascii=False, default=str),
            file=self.out,
            flush=True,
        )

    def show(
        self,
        data: Any,
        columns: Sequence[str],
        rows: Sequence[Sequence[Any]],
        *,
        title: str | None = None,
    ) -> bool:
        """One result: ``data`` as the JSON document in ``--json`` mode, else a table.

        Returns:
            Whether it was shown as a table (human mode), for the notes that follow it.
        """
        if self.json_mode:
            self.emit_json(data)
            return False
        self.table(columns, rows, title=title)
        return True

    def table(
        self, columns: Sequence[str], rows: Sequence[Sequence[Any]], *, title: str | None = None
    ) -> None:
        """A table on stdout (human mode only); a ``None`` cell is shown as ``-``."""
        if self.json_mode:
            return
        cells = [["-" if c is None else printable(str(c), keep="") for c in row] for row in rows]
        if self.out_console is not None:
            table = Table(title=title, title_justify="left")
            for index, name in enumerate(columns):
                # the first column holds ids: kept whole; the others fold when too long
                table.add_column(name, overflow="fold", no_wrap=index == 0)
            for row in cells:
                table.add_row(*(Text(cell) for cell in row))  # text, never rich markup
            self.out_console.print(table)
            return
        widths = [max(map(len, column)) for column in zip(columns, *cells, strict=True)]
        # On a terminal the widest columns but the first (ids) narrow, wrapping, to fit.
        fit = shutil.get_terminal_size().columns if self.out_tty else 0
        while fit and sum(widths) + 2 * len(widths) - 2 > fit and max(widths[1:], default=0) > 12:
            widths[max(range(1, len(widths)), key=widths.__getitem__)] -= 1

        def line(row: Sequence[str]) -> str:
            wrapped = [
                textwrap.wrap(c, w) if i and len(c) > w else [c]
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ]
            return "\n".join(
                "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
                for cells in itertools.zip_longest(*wrapped, fillvalue="")
            )

        lines = (textwrap.wrap(title, fit) if fit else [title]) if title else []
        lines += [line(columns), "  ".join("-" * w for w in widths), *map(line, cells)]
        print("\n".join(lines), file=self.out, flush=True)

    @contextmanager
    def progress(self, description: str, total: int, detail: str = "") -> Iterator[Progress]:
        """A progress display of ``total`` steps on stderr (``detail`` after the counter)."""
        bar = Progress(self, description, total, detail)
        try:
            yield bar
        finally:
            bar.stop()


class Progress:
    """One progress display (see :meth:`UI.progress`)."""

    #: Plain-text mode prints at most one line per this many seconds (plus the last one).
    PLAIN_INTERVAL = 2.0

    def __init__(self, ui: UI, description: str, total: int, detail: str = "") -> None:
        """Show the display."""
        self._ui = ui
        self.description = description
        self.total = total
        self.completed = 0
        self.detail = detail
        self._rich: Any = None
        self._last_print = 0.0
        self._last_shown = -1
        if ui.err_console is not None:
            self._rich = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[detail]}"),
                console=ui.err_console,
            )
            self._rich.start()
            self._task = self._rich.add_task(description, total=total, detail=detail)
        else:
            self._plain(force=False)

    def advance(self, *, detail: str | None = None) -> None:
        """Move one step forward (``detail``: the text after the counter)."""
        self.update(self.completed + 1, detail=detail)

    def update(self, completed: int, *, detail: str | None = None) -> None:
        """Set the count (``detail``: the text after the counter)."""
        self.completed = completed
        if detail is not None:
            self.detail = detail
        if self._rich is not None:
            self._rich.update(self._task, completed=completed, detail=self.detail)
        else:
            self._plain(force=completed >= self.total)

    def _plain(self, *, force: bool) -> None:
        now = time.monotonic()
        if self.completed == self._last_shown:
            return
        if not force and self.completed and now - self._last_print < self.PLAIN_INTERVAL:
            return
        self._last_print = now
        self._last_shown = self.completed
        extra = f" ({self.detail})" if self.detail else ""
        print(
            f"{self.description}: {self.completed}/{self.total}{extra}",
            file=self._ui.err,
            flush=True,
        )

    def stop(self) -> None:
        """Leave the display as it is (the bar stays on screen)."""
        if self._rich is not None:
            self._rich.stop()
            self._rich = None
        else:  # the last count, unless it is on screen already
            self._plain(force=True)
