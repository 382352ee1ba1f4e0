"""The import rules of the layout table in DESIGN.md and CONTRIBUTING.md, checked over the source with an AST walk.

Every import counts: module level, inside functions, and under ``TYPE_CHECKING``.
"""

from __future__ import annotations

import ast
import graphlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("spanedge", "edge_agent", "hub", "placement", "simulate")

#: What each layer may import from the project (the CLI, ``spanedge.cli``, is the composition root).
ALLOWED: dict[str, set[str]] = {
    "core": {"core", "runtime"},  # spanedge.testing runs records through the runtime
    "runtime": {"core", "runtime"},
    "cli": {"core", "runtime", "cli", "edge_agent", "hub", "placement", "simulate"},
    "placement": {"core", "runtime", "placement"},
    "edge_agent": {"core", "runtime", "edge_agent"},
    "hub": {"core", "runtime", "placement", "hub"},
    "simulate": {"core", "runtime", "edge_agent", "hub", "placement", "simulate"},
}

#: The runtime does no I/O: these are the only outside modules it may use.
RUNTIME_OUTSIDE = {
    "__future__",
    "collections",
    "dataclasses",
    "hashlib",
    "heapq",
    "logging",
    "math",
    "orjson",
    "time",
    "typing",
}


def layer_of(module: str) -> str | None:
    """The layer a dotted module name belongs to, or None outside the project."""
    parts = module.split(".")
    top = parts[0]
    if top not in PACKAGES:
        return None
    if top == "spanedge" and len(parts) > 1 and parts[1] in ("cli", "runtime"):
        return parts[1]
    return "core" if top == "spanedge" else top


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[str, int]]:
    """Every module ``path`` imports, with the line, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            found.append((target, node.lineno))
            # ``from pkg import module`` imports a module, not only a name
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if (ROOT / Path(*candidate.split("."))).with_suffix(".py").exists():
                    found.append((candidate, node.lineno))
    return found


def project_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_every_import_follows_the_layout_table() -> None:
    wrong = []
    for path in project_files():
        here = layer_of(module_name(path))
        assert here is not None
        for target, line in imports_of(path):
            there = layer_of(target)
            if there is not None and there not in ALLOWED[here]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({here}) imports {target} ({there})")
    assert wrong == []


def test_the_runtime_does_no_io() -> None:
    wrong = []
    for path in sorted((ROOT / "spanedge" / "runtime").rglob("*.py")):
        for target, line in imports_of(path):
            top = target.split(".")[0]
            if layer_of(target) is None and top not in RUNTIME_OUTSIDE:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert wrong == []


def test_no_two_modules_import_each_other() -> None:
    modules = {module_name(p): p for p in project_files()}
    imports: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target, _ in imports_of(path):
            # ``from pkg import x`` where pkg is a package counts as importing pkg/__init__
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(f"{target}."):
                imports[name].add(target)
    try:
        graphlib.TopologicalSorter(imports).prepare()
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


#: The hub's wings, each above the ones after it: a wing imports only itself and the wings below it.
HUB_WINGS = ("api", "control", "models", "engine", "ingest", "handover")


def hub_wing(module: str) -> str | None:
    """The wing of a ``hub`` module, ``"top"`` for the modules that assemble the hub, None outside the hub."""
    parts = module.split(".")
    if parts[0] != "hub":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in HUB_WINGS else "top"


def test_the_hub_wings_import_only_downwards() -> None:
    wrong = []
    for path in sorted((ROOT / "hub").rglob("*.py")):
        here = hub_wing(module_name(path))
        if here == "top":
            continue
        for target, line in imports_of(path):
            there = hub_wing(target)
            if there is None or target == "hub":
                continue
            if there == "top" or HUB_WINGS.index(there) < HUB_WINGS.index(here):
                wrong.append(f"{path.relative_to(ROOT)}:{line} (hub.{here}) imports {target}")
    assert wrong == []


def test_the_hub_has_no_module_outside_its_wings_but_its_assembly() -> None:
    top = sorted(p.name for p in (ROOT / "hub").glob("*.py"))
    assert top == ["__init__.py", "dataplane.py", "server.py"]


def test_the_light_core_never_imports_networkx() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for pkg in ("spanedge", "edge_agent")
        for path in sorted((ROOT / pkg).rglob("*.py"))
        for target, line in imports_of(path)
        if target.split(".")[0] == "networkx"
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("spanedge.app", "core"),
        ("spanedge.runtime.pipeline", "runtime"),
        ("spanedge.cli.deploy", "cli"),
        ("hub.engine.engine", "hub"),
        ("pyspark.sql", None),
    ],
)
def test_layer_of(module: str, layer: str | None) -> None:
    assert layer_of(module) == layer


def test_importing_the_core_loads_no_package_above_it() -> None:
    import subprocess

    code = (
        "import sys, spanedge, spanedge.app, spanedge.runtime, spanedge.testing, spanedge.plan, spanedge.sites;"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('edge_agent', 'hub', 'placement', 'simulate', 'pyspark', 'fastapi', 'pulp', 'numpy'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""
