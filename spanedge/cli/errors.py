"""How a command reports a user's mistake: one line on stderr and an exit code, never a traceback."""

from __future__ import annotations

from pathlib import Path

import typer


def fail(error: Exception | str, code: int = 2) -> typer.Exit:
    """Print an error for a person and return the exit to raise."""
    typer.secho(f"error: {error}", err=True, fg=typer.colors.RED)
    return typer.Exit(code)


def write_output(path: Path, text: str) -> None:
    """Write a file the user asked for, or exit with why it cannot be written."""
    try:
        path.write_text(text)
    except OSError as exc:
        msg = f"cannot write {path}: {exc.strerror}; pass a path in a writable directory"
        raise fail(msg) from None
