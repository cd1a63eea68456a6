"""The import rules of ARCHITECTURE.md ("Layers and dependencies"), checked on every module under nereus/.

Every import counts, at the top of a module or inside a function (``ast`` reads them all).

1. Floors (``FLOORS``): a module imports only its own package and packages on lower floors;
   packages on one floor never import each other.
2. No cycle between packages: each package (subpackages apart) and each top-level module is a
   node; a package's ``__init__`` is a node of its own, the front door that may gather its
   subpackages (a backend chosen by URL scheme).
3. No cycle between modules, however deep in a function an import hides it. An import under
   ``if TYPE_CHECKING:`` never runs: it counts for the floors only.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nereus"

#: The floors, lowest first: the packages and top-level modules under nereus/ on each.
#: ARCHITECTURE.md shows the same table (``test_architecture_shows_the_floors``).
FLOORS: tuple[tuple[str, ...], ...] = (
    ("tasks", "lanes", "scraped", "file_urls", "net_limits", "tls", "wrong_port", "lifeline", "cyclic_gc",
     "direct_io"),
    ("meta", "objstore", "wal", "codec", "http_limits", "tls_offload", "admin_cli"),
    ("storage",),
    ("ledger",),
    ("auth", "topics"),
    ("transactions",),
    ("pulsar", "kafka", "lakehouse"),
    ("broker", "tokens_cli"),
    ("cli",),
)
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_package(module: str) -> bool:
    return MODULES[module].name == "__init__.py"


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the module it loads (a package for a name its __init__ defines)
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``

    def __str__(self) -> str:
        path = MODULES[self.module].relative_to(ROOT) if self.module in MODULES else self.module
        return f"{path}:{self.line}: {self.module} imports {self.target}"


def imports_in(module: str, source: str) -> list[Import]:
    """Every import of another nereus module in ``source`` (the text of ``module``)."""
    tree = ast.parse(source)
    type_only = {line for node in ast.walk(tree)
                 if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                 for inner in node.body for line in range(inner.lineno, inner.end_lineno + 1)}
    package = module if module in MODULES and is_package(module) else module.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            targets = [f"{base}.{alias.name}" for alias in node.names]  # a submodule, or a name of ``base``
        elif (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            targets = [node.args[0].value]
        else:
            continue
        for target in targets:
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target in MODULES and target != module:
                out.append(Import(module, target, node.lineno, node.lineno in type_only))
    return list(dict.fromkeys(out))  # ``from p import a, b``: one import of p


IMPORTS = [imp for module, path in MODULES.items() for imp in imports_in(module, path.read_text())]


def floor_name(module: str) -> str:
    """The floor table's name for the package or top-level module that holds ``module``."""
    return module.split(".")[1] if "." in module else module


def against_the_floors(imports: Iterable[Import]) -> list[str]:
    out = []
    for imp in imports:
        mine, theirs = floor_name(imp.module), floor_name(imp.target)
        if mine == theirs or "nereus" in (mine, theirs):
            continue
        if FLOOR[theirs] >= FLOOR[mine]:
            out.append(f"  {imp} ({theirs} is on floor {FLOOR[theirs]}, {mine} on floor {FLOOR[mine]})")
    return out


def package_node(module: str) -> str:
    """``module``'s node in the package graph."""
    if is_package(module):
        return f"{module}.__init__"
    package = module.rpartition(".")[0]
    return module if package == "nereus" else package


def cycles(imports: Iterable[Import], node: Callable[[str], str]) -> list[str]:
    """Each cycle of the graph of ``node(importer) -> node(imported)``, told by the imports that make it."""
    edges: dict[str, set[str]] = defaultdict(set)
    imports = [imp for imp in imports if node(imp.module) != node(imp.target)]
    for imp in imports:
        edges[node(imp.module)].add(node(imp.target))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(group) > 1:
                groups.append(set(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [f"cycle between {', '.join(sorted(group))}:\n" + "\n".join(
        f"  {imp}" for imp in imports if node(imp.module) in group and node(imp.target) in group) for group in groups]


def test_every_package_is_on_a_floor():
    missing = sorted({floor_name(m) for m in MODULES} - set(FLOOR) - {"nereus"})
    assert not missing, f"not on any floor: {', '.join(missing)} (add them to FLOORS in {Path(__file__).name} " \
                        "and to the floor table of ARCHITECTURE.md)"


def test_no_import_from_a_higher_floor():
    bad = against_the_floors(IMPORTS)
    assert not bad, "imports against the floors of ARCHITECTURE.md (\"Layers and dependencies\"):\n" + "\n".join(bad)


def test_no_package_cycle():
    found = cycles(IMPORTS, package_node)
    assert not found, "packages that import each other:\n" + "\n".join(found)


def test_no_module_cycle():
    found = cycles([imp for imp in IMPORTS if not imp.type_only], lambda module: module)
    assert not found, "modules that import each other (imports inside functions count):\n" + "\n".join(found)


def test_architecture_shows_the_floors():
    shown = re.findall(r"^ +floor (\d+): (.+)$", (ROOT / "ARCHITECTURE.md").read_text(), re.M)
    assert sorted((int(level), tuple(names.split())) for level, names in shown) == list(enumerate(FLOORS)), \
        f"the floor table of ARCHITECTURE.md differs from FLOORS in {Path(__file__).name}: make them agree"


def test_the_reader_sees_every_import():
    source = '''
import importlib
from typing import TYPE_CHECKING

from . import records
from ..meta import cas

if TYPE_CHECKING:
    from .service import StreamStorage


def later():
    from ..topics.topic import Topic
    import nereus.ledger.naming
    return importlib.import_module("nereus.tokens_cli")
'''
    found = imports_in("nereus.storage.gc", source)
    assert {(imp.target, imp.type_only) for imp in found} == {
        ("nereus.storage.records", False), ("nereus.meta.cas", False), ("nereus.storage.service", True),
        ("nereus.topics.topic", False), ("nereus.ledger.naming", False), ("nereus.tokens_cli", False)}
    assert sorted(line.split(": ")[1] for line in against_the_floors(found)) == [
        "nereus.storage.gc imports nereus.ledger.naming (ledger is on floor 3, storage on floor 2)",
        "nereus.storage.gc imports nereus.tokens_cli (tokens_cli is on floor 7, storage on floor 2)",
        "nereus.storage.gc imports nereus.topics.topic (topics is on floor 4, storage on floor 2)"]
