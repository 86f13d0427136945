"""docs/design.md stays true to src/shardkit: every module has its row in the Modules table and
its place in the Layers table, no row names a module that is gone, and every import points
down the layers (or within one), as the page says.

A table cell names modules in backticks: ``pack.py``, ``formats/zip.py``, or a package and then
its modules, ``formats/`` : ``base.py``, ``zip.py`` (a name the package has no module of is a
top-level module); a package named alone stands for all of it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.corpus import REPO_ROOT

SRC = REPO_ROOT / "src" / "shardkit"
DESIGN = REPO_ROOT / "docs" / "design.md"


def modules() -> list[str]:
    """Every module of the package, as a path relative to src/shardkit ("formats/zip.py")."""
    found = (p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py"))
    return sorted(m for m in found if not m.startswith("templates/") and m != "__init__.py")


def table(title: str) -> list[list[str]]:
    """The rows (cells) of the table under the heading ``## {title}`` of design.md."""
    section = DESIGN.read_text(encoding="utf-8").split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row] for row in rows[2:]]  # past the header and its rule


def named(cell: str) -> list[str]:
    """The modules and packages a cell names, in order ("formats/" then "base.py": "formats/base.py",
    "location/" then "errors.py": "errors.py")."""
    names = []
    package = ""
    for token in re.findall(r"`([^`]+)`", cell):
        if token.endswith("/"):
            package = token
            names.append(token)
        elif token.endswith(".py"):  # a module of the package named before it, if it has one so named
            names.append(package + token if package and (SRC / package / token).is_file() else token)
    return names


def covers(name: str, module: str) -> bool:
    return module == name or (name.endswith("/") and module.startswith(name))


def layer_of(module: str, layers: list[list[str]]) -> int:
    places = [i for i, names in enumerate(layers) if any(covers(n, module) for n in names)]
    assert len(places) == 1, f"docs/design.md's Layers table puts {module} in {len(places)} layers"
    return places[0]


def runtime_imports(module: str) -> set[str]:
    """The modules of the package that ``module`` imports when it runs (not for type checking only)."""
    path = SRC / module
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):  # drop `if TYPE_CHECKING:` blocks
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            node.body = []
    package = Path(module).parent
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package
            for _ in range(node.level - 1):
                base = base.parent
        elif node.module and node.module.split(".")[0] == "shardkit":
            base, node.module = Path(), ".".join(node.module.split(".")[1:]) or None
        else:
            continue
        target = base.joinpath(*node.module.split(".")) if node.module else base
        candidates = [target / "__init__.py", *(target / f"{a.name}.py" for a in node.names)]  # `from . import x`
        if node.module:
            candidates.append(target.with_suffix(".py"))
        found.update(c.as_posix() for c in candidates if (SRC / c).is_file() and c.as_posix() != "__init__.py")
    return found - {module}


def test_every_module_has_its_row_and_every_row_its_module() -> None:
    rows = [name for row in table("Modules") for name in named(row[0])]
    missing = [m for m in modules() if not any(covers(name, m) for name in rows)]
    assert not missing, f"docs/design.md's Modules table has no row for {missing}"
    gone = [name for name in rows if not any(covers(name, m) for m in modules())]
    assert not gone, f"docs/design.md's Modules table names modules that do not exist: {gone}"


def test_imports_point_down_the_layers() -> None:
    layers = [named(row[1]) for row in table("Layers")]
    gone = [name for names in layers for name in names if not any(covers(name, m) for m in modules())]
    assert not gone, f"docs/design.md's Layers table names modules that do not exist: {gone}"
    upward = [
        f"{module} imports {imported}"
        for module in modules()
        for imported in sorted(runtime_imports(module))
        if layer_of(imported, layers) < layer_of(module, layers)
    ]
    assert not upward, f"imports against docs/design.md's layers (top first): {upward}"


def test_an_import_up_the_layers_is_found() -> None:
    # workstate.py imports manifest.py (a building block): in the I/O layer it would point up.
    assert "manifest.py" in runtime_imports("workstate.py")
    layers = [named(row[1]) for row in table("Layers")]
    assert layer_of("manifest.py", layers) < layer_of("errors.py", layers)
    assert named("`formats/` : `base.py` (the `ShardFormat` interface), `zip.py`, the registry in `__init__.py`") == [
        "formats/",
        "formats/base.py",
        "formats/zip.py",
        "formats/__init__.py",
    ]
    assert named("`formats/` (the formats), `errors.py`") == ["formats/", "errors.py"]
