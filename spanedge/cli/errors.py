"""How a command reports a user's mistake: one line on stderr and an exit code, never a traceback."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import click


def fail(error: Exception | str, code: int = 2) -> click.exceptions.Exit:
    """Print an error for a person and return the exit to raise."""
    click.secho(f"error: {error}", err=True, fg="red")
    return click.exceptions.Exit(code)


def write_output(path: Path, text: str) -> None:
    """Write a file the user asked for, or exit with why it cannot be written."""
    try:
        path.write_text(text)
    except OSError as exc:
        msg = f"cannot write {path}: {exc.strerror}; pass a path in a writable directory"
        raise fail(msg) from None


def check_hub_url(url: str) -> None:
    """Exit with why ``url`` (``--hub-url`` or ``SPANEDGE_HUB_URL``) is not a hub address, if it is not one."""
    hint = "pass it as https://HOST:PORT (--hub-url or SPANEDGE_HUB_URL)"
    if not url.startswith(("http://", "https://")):
        msg = f"hub URL must start with http:// or https://, got {url!r}; {hint}"
        raise fail(msg)
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - reading it checks the port
    except ValueError as exc:
        msg = f"invalid hub URL {url!r}: {exc}; {hint}"
        raise fail(msg) from None
    if not parts.hostname:
        msg = f"hub URL {url!r} names no host; {hint}"
        raise fail(msg)
