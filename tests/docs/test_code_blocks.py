"""Every ```python block of the documentation runs, with pytest-markdown-docs.

A block meant only to be shown is fenced as ``text`` (or ``bash``, ``yaml``...), never ``python``. The blocks
run in a pytest of their own over ``docs/``, so that they need no test file beside them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_python_block_of_the_docs_runs() -> None:
    pytest.importorskip("pytest_markdown_docs", reason="pip install pytest-markdown-docs (part of spanedge[dev])")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--markdown-docs",
            "docs",
            "--ignore=docs/hooks",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout, done.stdout
