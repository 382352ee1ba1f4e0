"""networkx stays in the placement service: the light core and the agent never load it.

The AST scan of the light core's sources is in ``tests/unit/test_layering.py``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PLACEMENT = sorted((ROOT / "placement").rglob("*.py"))


def imported(path: Path) -> list[tuple[str, int]]:
    """Every module ``path`` imports by name, anywhere in the file (functions and ``TYPE_CHECKING`` included)."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append(("." * node.level + (node.module or ""), node.lineno))
    return found


def loaded_after(imports: str) -> set[str]:
    """The top-level packages loaded by a fresh interpreter after ``imports``."""
    code = f"import sys; {imports}; print(','.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return set(out.stdout.strip().split(","))


def test_importing_the_light_core_and_the_agent_loads_no_networkx() -> None:
    loaded = loaded_after("import spanedge, spanedge.app, spanedge.runtime, spanedge.testing, edge_agent.agent")
    assert "edge_agent" in loaded
    assert "networkx" not in loaded


def test_the_placement_service_loads_networkx() -> None:
    assert "networkx" in loaded_after("import placement")
    assert any(target == "networkx" for path in PLACEMENT for target, _ in imported(path))


def test_no_placement_module_imports_the_placement_package_itself() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for path in PLACEMENT
        for target, line in imported(path)
        if target in ("placement", ".")
    ]
    assert wrong == []
