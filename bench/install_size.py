"""Installed size of the light core: ``pip install .`` with no extras in a fresh venv, per distribution.

Counts the files each installed distribution lists in its ``RECORD`` (with the
bytecode pip compiles), in disk blocks as ``du`` counts them, without pip and
setuptools, which every venv gets. Prints the table next to the 40 MB goal and,
as the same-run baseline, the same install with ``--no-compile``.

Run: ``.venv/bin/python bench/install_size.py``
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
GOAL_MB = 40.0
#: What every venv gets; not counted.
BASE = {"pip", "setuptools"}


def _sources(into: Path) -> Path:
    """A copy of what the build needs (no venvs, caches or tests)."""
    src = into / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "spanedge", "edge_agent", "hub", "placement", "simulate"):
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    return src


def _install(src: Path, into: Path, *pip_args: str) -> Path:
    """A fresh venv at ``into`` with ``pip install src``; its site-packages."""
    venv.EnvBuilder(with_pip=True).create(into)
    python = into / "bin" / "python"
    cmd = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *pip_args, str(src)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"pip install failed:\n{done.stdout}\n{done.stderr}")
    found = list((into / "lib").glob("python3*/site-packages"))
    return found[0]


def _blocks(path: Path) -> int:
    """Bytes on disk of one file (``du``'s count), 0 if it is gone."""
    try:
        return os.stat(path).st_blocks * 512
    except FileNotFoundError:
        return 0


def sizes(site_packages: Path) -> dict[str, int]:
    """Bytes on disk of each installed distribution, from the files its RECORD lists."""
    out: dict[str, int] = {}
    for record in site_packages.glob("*.dist-info/RECORD"):
        name = record.parent.name.split("-")[0].lower().replace("_", "-")
        if name in BASE:
            continue
        with record.open(newline="") as f:
            files = {(site_packages / row[0]).resolve() for row in csv.reader(f) if row}
        out[name] = sum(_blocks(p) for p in files)
    return out


def main() -> None:
    """Measure both installs and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=12, help="distributions to list one by one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spanedge-size-") as tmp:
        base = Path(tmp)
        src = _sources(base)
        compiled = sizes(_install(src, base / "venv"))
        plain = sizes(_install(src, base / "venv-nc", "--no-compile"))
    table = Table(title="light core: pip install spanedge (no extras)")
    table.add_column("distribution")
    table.add_column("MiB (with bytecode)", justify="right")
    table.add_column("MiB (--no-compile)", justify="right")
    for name, size in sorted(compiled.items(), key=lambda kv: -kv[1])[: args.top]:
        table.add_row(name, f"{size / MIB:.1f}", f"{plain.get(name, 0) / MIB:.1f}")
    total, total_nc = sum(compiled.values()), sum(plain.values())
    table.add_row("[bold]total[/bold]", f"[bold]{total / MIB:.1f}[/bold]", f"{total_nc / MIB:.1f}")
    Console().print(table)
    verdict = "met" if total / 1e6 <= GOAL_MB else "NOT met"
    print(f"total {total / 1e6:.1f} MB ({total / MIB:.1f} MiB) against the goal of {GOAL_MB:.0f} MB: {verdict}")


if __name__ == "__main__":
    main()
