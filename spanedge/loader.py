"""Loading a user's app from a Python file or from source text."""

from __future__ import annotations

import hashlib
import sys
import traceback
import types
from pathlib import Path

from spanedge.app import App
from spanedge.errors import InvalidDataflow


def load_app(path: str | Path, attribute: str | None = None) -> App:
    """Import ``path`` and return its :class:`App` (the one named ``attribute``, or the only one)."""
    path = Path(path)
    if not path.is_file():
        msg = f"app file {path} does not exist; pass the path of a Python file that defines an App"
        raise InvalidDataflow(msg)
    return load_app_source(path.read_text(), str(path), attribute)


def load_app_source(source: str, filename: str = "<app>", attribute: str | None = None) -> App:
    """Execute app source code and return its :class:`App`."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    module = types.ModuleType(f"spanedge_app_{digest}")
    module.__file__ = filename
    sys.modules[module.__name__] = module
    try:
        exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102 - the user's own app
    except InvalidDataflow:
        raise
    except SyntaxError as exc:
        msg = f"{filename}:{exc.lineno}: syntax error in app: {exc.msg}"
        raise InvalidDataflow(msg) from None
    except Exception as exc:  # the user's module failed at import: say where, in their file, and why
        raise InvalidDataflow(_import_failure(exc, filename)) from None
    apps = {k: v for k, v in vars(module).items() if isinstance(v, App)}
    if attribute is not None:
        if attribute not in apps:
            msg = f"{filename} has no App named {attribute!r} (found: {', '.join(apps) or 'none'})"
            raise InvalidDataflow(msg)
        return apps[attribute]
    if len(apps) != 1:
        msg = f"{filename} must define exactly one App (found: {', '.join(apps) or 'none'}); pick one with --app-name"
        raise InvalidDataflow(msg)
    return next(iter(apps.values()))


def _import_failure(exc: Exception, filename: str) -> str:
    """One line of cause, with the first and last frame of the app's own file in the traceback."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    where = f"{filename}:{frames[0].lineno}" if frames else filename
    msg = f"{where}: the app raised {type(exc).__name__} while loading: {exc}"
    if len(frames) > 1:
        msg += f" (in {frames[-1].name} at {filename}:{frames[-1].lineno})"
    if isinstance(exc, ImportError):
        msg += "; is that module installed where the app runs?"
    return msg


def source_hash(source: str) -> str:
    """The SHA-256 of an app's source code."""
    return hashlib.sha256(source.encode()).hexdigest()


__all__ = ["load_app", "load_app_source", "source_hash"]
