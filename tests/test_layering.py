"""The package's dependencies point down: checked by walking every import with ``ast``.

* Every module belongs to a layer (its folder, or a top-level module), and imports only from
  its own folder or from layers below it (:data:`LAYERS`): the folders show the layers.
* No import circle between the package's modules. In the runtime (everything below the
  client) type-only imports count too: ``if TYPE_CHECKING:`` is how a circle used to hide.
* Nothing below the client imports ``_client`` or ``AsyncVideoGen``: resources and engines
  depend on the transport and on narrow interfaces.
* No import hidden inside a function in the runtime (a lazy import is how a circle hides).

Each failure names the offending edge as ``importer -> imported (file:line)``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import attrs

PACKAGE = Path(__file__).resolve().parent.parent / "videogen_async"
ROOT = "videogen_async"

#: Modules that sit above the client and may use it: the package's face, the CLI, the sandbox.
ABOVE_CLIENT = (
    "videogen_async",
    "videogen_async.__main__",
    "videogen_async._client",
    "videogen_async._driven_loop",
    "videogen_async._blocking",
)
ABOVE_CLIENT_PACKAGES = ("videogen_async._cli", "videogen_async.testing", "videogen_async._mcp")

#: Imports inside functions that are not circles being dodged: the pytest plugin's loading of
#: the sandbox only when a test asks for it (the plugin is loaded in every pytest run of a
#: project that installs the package). The runtime has none.
ALLOWED_FUNCTION_IMPORTS = {
    ("videogen_async.testing._pytest_plugin", "videogen_async.testing._server"),
}


#: The layers, bottom first. A module imports from its own folder or from a lower layer only;
#: two folders of one layer never import each other. A top-level module is its own "folder".
LAYERS = (
    ("_version", "_contract", "_files"),  # the service stated once; a file written whole
    ("_observe",),  # hooks, spans, logging
    ("_http",),  # transport, session, retry decision, pacing, per-call options, webhooks
    ("_waiting",),  # single waits, the gather and its schedule
    ("_resources", "_download"),  # the namespaces, the downloads
    ("_ledger",),  # the durable record, below the client: it takes any client-shaped object
    ("_client",),  # AsyncVideoGen composes the layers below
    ("_driven_loop",),  # one event loop run by the threads whose calls it serves
    ("_blocking",),  # VideoGen, over the async client
    ("",),  # the package's face: videogen_async/__init__.py
    ("temporal",),  # the Temporal integration (an extra)
    ("testing",),  # the sandbox
    ("_mcp",),  # the MCP server (an extra), on the ledger, the client and the sandbox's schemas
    ("_cli",),  # the command line
    ("__main__",),  # python -m videogen_async
)


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _rank(folder: str) -> int | None:
    return next((i for i, layer in enumerate(LAYERS) if folder in layer), None)


@attrs.frozen
class Edge:
    importer: str
    imported: str
    names: tuple[str, ...]
    where: str
    in_function: bool
    type_only: bool = False

    def __str__(self) -> str:
        return f"{self.importer} -> {self.imported} ({self.where})"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for _ in range(node.level - 1):
        package = package.rsplit(".", 1)[0]
    return f"{package}.{node.module}" if node.module else package


class _Collector(ast.NodeVisitor):
    def __init__(self, module: str, path: Path, known: set[str]) -> None:
        self.module = module
        self.path = path
        self.known = known
        self.depth = 0
        self.type_only = 0
        self.edges: list[Edge] = []

    def visit_If(self, node: ast.If) -> None:
        test = ast.unparse(node.test)
        if test in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            self.type_only += 1
            for child in node.body:
                self.visit(child)
            self.type_only -= 1
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function
    visit_Lambda = _function

    def _add(self, imported: str, names: tuple[str, ...], line: int) -> None:
        where = f"{self.path.relative_to(PACKAGE.parent)}:{line}"
        self.edges.append(
            Edge(self.module, imported, names, where, self.depth > 0, self.type_only > 0)
        )

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, (), node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _resolve(self.module, self.path, node)
        names = tuple(a.name for a in node.names)
        submodules = [n for n in names if f"{base}.{n}" in self.known]
        for name in submodules:
            self._add(f"{base}.{name}", (), node.lineno)
        rest = tuple(n for n in names if n not in submodules)
        if rest or not submodules:
            self._add(base, rest, node.lineno)


def _edges() -> list[Edge]:
    modules = _modules()
    known = set(modules)
    edges: list[Edge] = []
    for module, path in modules.items():
        collector = _Collector(module, path, known)
        collector.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        edges.extend(collector.edges)
    return edges


def _below_client(module: str) -> bool:
    if module in ABOVE_CLIENT:
        return False
    return not any(module == p or module.startswith(p + ".") for p in ABOVE_CLIENT_PACKAGES)


def _cycle(graph: dict[str, list[Edge]]) -> list[Edge] | None:
    """One import circle as its edges, or ``None``."""
    state: dict[str, int] = {}
    stack: list[Edge] = []

    def visit(node: str) -> list[Edge] | None:
        state[node] = 1
        for edge in graph.get(node, []):
            target = edge.imported
            if state.get(target) == 1:
                start = (
                    next(i for i, e in enumerate(stack) if e.importer == target)
                    if any(e.importer == target for e in stack)
                    else len(stack)
                )
                return [*stack[start:], edge]
            if target not in state:
                stack.append(edge)
                found = visit(target)
                if found:
                    return found
                stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_walk_sees_the_package() -> None:
    edges = _edges()
    importers = {e.importer for e in edges}
    assert {"videogen_async._client", "videogen_async._http._transport"} <= importers
    assert any(e.imported == "videogen_async._http._transport" for e in edges)


def test_every_module_belongs_to_a_layer() -> None:
    unplaced = sorted({_folder(m) for m in _modules() if _rank(_folder(m)) is None})
    assert unplaced == [], f"folders or top-level modules in no layer of LAYERS: {unplaced}"


def test_imports_point_down_the_layers() -> None:
    known = set(_modules())
    offending = []
    for edge in _edges():
        if edge.imported not in known:
            continue
        mine, theirs = _folder(edge.importer), _folder(edge.imported)
        if mine == theirs:
            continue
        low, high = _rank(theirs), _rank(mine)
        if low is None or high is None or low >= high:
            offending.append(str(edge))
    assert offending == [], "imports that do not point down the layers: " + "; ".join(offending)


def test_no_import_circle() -> None:
    known = set(_modules())
    graph: dict[str, list[Edge]] = {}
    for edge in _edges():
        if edge.imported in known and edge.imported != edge.importer:
            # Importing a package runs its __init__, which is not a circle through a child.
            if edge.importer.startswith(edge.imported + "."):
                continue
            # Above the client (sandbox, CLI) only the imports that run at import time make a
            # circle; the lazy imports listed above are allowed there and left out.
            if not _below_client(edge.importer) and (
                edge.type_only
                or (edge.in_function and (edge.importer, edge.imported) in ALLOWED_FUNCTION_IMPORTS)
            ):
                continue
            graph.setdefault(edge.importer, []).append(edge)
    cycle = _cycle(graph)
    assert cycle is None, "import circle: " + " ; ".join(str(e) for e in cycle or [])


def test_nothing_below_the_client_imports_it() -> None:
    offending = [
        str(edge)
        for edge in _edges()
        if _below_client(edge.importer)
        and (
            edge.imported == "videogen_async._client"
            or ("AsyncVideoGen" in edge.names and edge.imported.startswith(ROOT))
        )
    ]
    assert offending == [], "imports of the client from below it: " + "; ".join(offending)


def test_no_import_inside_a_function() -> None:
    offending = [
        str(edge)
        for edge in _edges()
        if edge.in_function and (edge.importer, edge.imported) not in ALLOWED_FUNCTION_IMPORTS
    ]
    assert offending == [], "imports inside functions: " + "; ".join(offending)


def test_the_runtime_has_no_import_inside_a_function_at_all() -> None:
    runtime = [
        str(edge)
        for edge in _edges()
        if edge.in_function
        and _below_client(edge.importer)
        and not edge.importer.startswith(f"{ROOT}.testing")
    ]
    assert runtime == []


def test_the_checker_names_a_circle() -> None:
    a = Edge("pkg.a", "pkg.b", (), "pkg/a.py:1", in_function=False)
    b = Edge("pkg.b", "pkg.a", (), "pkg/b.py:3", in_function=False)
    cycle = _cycle({"pkg.a": [a], "pkg.b": [b]})
    assert cycle is not None
    assert [str(e) for e in cycle] == ["pkg.a -> pkg.b (pkg/a.py:1)", "pkg.b -> pkg.a (pkg/b.py:3)"]
    assert _cycle({"pkg.a": [a]}) is None


def _named_on_the_architecture_page(module: str, page: str) -> bool:
    """Whether ``docs/architecture.md`` names a module: ``folder/name.py`` anywhere, or
    ``name.py`` in a section or paragraph that names its folder (``folder/``)."""
    parts = module.split(".")[1:]
    name = f"{parts[-1]}.py"
    if len(parts) == 1:
        return name in page
    folder = "/".join(parts[:-1]) + "/"
    blocks = page.split("\n## ") + page.split("\n\n")
    return f"{folder}{name}" in page or any(folder in b and name in b for b in blocks)


def test_the_architecture_page_names_every_module() -> None:
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [
        module
        for module, path in _modules().items()
        if path.name != "__init__.py" and not _named_on_the_architecture_page(module, page)
    ]
    assert missing == [], f"modules docs/architecture.md does not name: {missing}"


def test_the_page_check_can_fail() -> None:
    page = "## `_http/`\n\n`_transport.py` sends.\n\n`_retry.py` decides.\n"
    assert _named_on_the_architecture_page("videogen_async._http._retry", page)
    assert not _named_on_the_architecture_page("videogen_async._http._pacing", page)
    assert not _named_on_the_architecture_page("videogen_async._ledger._retry", "`_retry.py`")
