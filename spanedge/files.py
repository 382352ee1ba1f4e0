"""Reading the files users write (apps, ``sites.yaml``, latency tables) with errors that say what to fix."""

from __future__ import annotations

from pathlib import Path

from spanedge.errors import SpanEdgeError


def read_text(path: Path, what: str, error: type[SpanEdgeError], hint: str = "") -> str:
    """The UTF-8 text of ``path``; ``error`` naming ``what`` (e.g. ``"sites file"``) and the cause otherwise.

    Raises:
        SpanEdgeError: of type ``error``: the file cannot be read (with ``hint`` appended) or is not UTF-8.
    """
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"cannot read {what} {path}: {exc.strerror or exc}" + (f"; {hint}" if hint else "")
        raise error(msg) from None
    except UnicodeDecodeError as exc:
        msg = f"{what} {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8"
        raise error(msg) from None
