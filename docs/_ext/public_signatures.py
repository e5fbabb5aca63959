"""Griffe extension: the reference shows what a user calls, as they call it.

Griffe reads the source without running it, so it sees what the code writes rather than what
it builds. This extension, run once the package is loaded, shows instead:

* the blocking client's calls as methods: ``download = _blocking(AsyncVideoGen.download)``
  (and each namespace's ``create = _blocking(Tasks.create)``) becomes the async call's
  signature and docstring, returning what the blocking call returns;
* ``VideoGen(...)`` with the parameters of ``AsyncVideoGen(...)`` but ``session`` (its
  ``__init__`` takes ``*args, **kwargs`` and receives that signature at run time);
* a default written as a module constant (``timeout=DEFAULT_TIMEOUT``) as its value
  (``Timeout(connect=10.0, read=60.0, total=120.0)``);
* only the bases a user can name: a base from a private module that the package does not
  export (``_Namespace``, ``DownloadCalls``, ``AsyncClosing``) is left out.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import griffe

#: The factories of ``_blocking.py`` and what the call they make returns (None: the same).
_WRAPPERS = {
    "_blocking": None,
    "_sync": None,
    "_raw": "RawResponse",
    "_iterating": "BlockingIterator",
    "_gathering": "BlockingGather",
    "_viewing": "VideoGen",
}
_CONSTANT = re.compile(r"[A-Z][A-Z0-9_]+")


def _classes(obj: griffe.Object) -> list[griffe.Class]:
    found: list[griffe.Class] = []
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Class):
            found.append(member)
        if isinstance(member, (griffe.Module, griffe.Class)):
            found.extend(_classes(member))
    return found


def _functions(obj: griffe.Object) -> list[griffe.Function]:
    found: list[griffe.Function] = []
    for member in obj.members.values():
        if member.is_alias:
            continue
        if isinstance(member, griffe.Function):
            found.append(member)
        elif isinstance(member, (griffe.Module, griffe.Class)):
            found.extend(_functions(member))
    return found


def _blocking_calls(blocking: griffe.Module) -> None:
    for cls in _classes(blocking):
        for name, member in list(cls.members.items()):
            value = getattr(member, "value", None)
            if member.is_alias or not isinstance(value, griffe.ExprCall):
                continue
            wrapper = str(value.function)
            if wrapper not in _WRAPPERS or len(value.arguments) != 1:
                continue
            target = blocking[str(value.arguments[0])]
            returns = _WRAPPERS[wrapper]
            if returns == "RawResponse":
                returns = f"RawResponse[{target.returns}]"
            call = griffe.Function(
                name,
                parameters=griffe.Parameters(*target.parameters),
                returns=returns or target.returns,
                docstring=target.docstring,
                lineno=member.lineno,
                endlineno=member.endlineno,
            )
            cls.set_member(name, call)


def _constructor(blocking: griffe.Module, client: griffe.Class) -> None:
    init = blocking["VideoGen.__init__"]
    kept = [p for p in client["__init__"].parameters if p.name != "session"]
    init.parameters = griffe.Parameters(*kept)


def _values(package: griffe.Module) -> None:
    for function in _functions(package):
        module: Any = None
        for parameter in function.parameters:
            default = str(parameter.default) if parameter.default is not None else ""
            if not _CONSTANT.fullmatch(default):
                continue
            try:  # a module of an extra not installed (temporal) keeps its names
                module = module or importlib.import_module(function.module.path)
            except ImportError:
                break
            value = repr(getattr(module, default))
            if not value.startswith("<"):  # a sentinel (UNSET) keeps its name
                parameter.default = value


def _public_bases(package: griffe.Module) -> None:
    exported: set[str] = set()
    for name in ("", ".testing"):
        exported |= set(importlib.import_module(package.path + name).__all__)
    for cls in _classes(package):
        kept = []
        for base in cls.bases:
            path = getattr(base, "canonical_path", str(base))
            private = path.startswith(package.path + ".") and "._" in path
            if not private or path.rsplit(".", 1)[-1] in exported:
                kept.append(base)
        cls.bases = kept


class PublicSignatures(griffe.Extension):
    """Rewrites the loaded package as the module docstring says."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Rewrite ``videogen_async`` once it is loaded."""
        if pkg.path != "videogen_async":
            return
        _values(pkg)  # first: the blocking calls take the parameters of the async ones
        blocking = pkg["_blocking"]
        _blocking_calls(blocking)
        _constructor(blocking, pkg["_client.AsyncVideoGen"])
        _public_bases(pkg)
