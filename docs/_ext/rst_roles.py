"""Griffe extension: render the reStructuredText markup of the docstrings as Markdown.

The package's docstrings follow the Google style and use a little reST inline markup
(``:class:`X```, ``:meth:`x```, ``::`` before an example). Markdown shows those roles
literally, so this extension turns a role into inline code (``~a.b.C`` into ``C``) and a
trailing ``::`` into ``:`` (a ``::`` alone on its line is dropped) when griffe loads each
object.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|data|mod|exc|obj|const):`~?([^`]+)`")
_LONE_LITERAL_MARKER = re.compile(r"^[ \t]*::[ \t]*\n", re.MULTILINE)
_LITERAL_MARKER = re.compile(r"::$", re.MULTILINE)


def _short(match: re.Match[str]) -> str:
    target = match.group(1)
    if match.group(0).split("`", 1)[1].startswith("~"):
        target = target.rsplit(".", 1)[-1]
    return f"`{target}`"


def rewrite(text: str) -> str:
    """Return ``text`` with reST roles as inline code and ``::`` markers as ``:`` (or gone)."""
    text = _LONE_LITERAL_MARKER.sub("", text)
    return _LITERAL_MARKER.sub(":", _ROLE.sub(_short, text))


class RstRoles(griffe.Extension):
    """Rewrites every docstring of the loaded objects (see the module docstring)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite the docstring of ``obj``, if it has one."""
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
