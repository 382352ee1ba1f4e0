"""Size limits that keep the runtime packages readable: small classes and functions."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("hub", "edge_agent", "simulate")
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 80


def oversized() -> list[str]:
    """Every class over :data:`MAX_CLASS_LINES` and function over :data:`MAX_FUNCTION_LINES` in the packages."""
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.ClassDef):
                    limit = MAX_CLASS_LINES
                elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    limit = MAX_FUNCTION_LINES
                else:
                    continue
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(
                        f"{path.relative_to(ROOT)}:{node.lineno} {node.name} has {lines} lines (at most {limit})"
                    )
    return found


def test_no_class_or_function_is_over_its_limit() -> None:
    assert oversized() == []
