"""Loading a user's app from a Python file or from source text."""

from __future__ import annotations

import hashlib
import sys
import traceback
import types
from pathlib import Path

from spanedge.app import App
from spanedge.errors import InvalidDataflow
from spanedge.files import read_text


def load_app(path: str | Path, attribute: str | None = None) -> App:
    """Import ``path`` and return its :class:`App` (the one named ``attribute``, or the only one)."""
    path = Path(path)
    return load_app_source(read_app_source(path), str(path), attribute)


def read_app_source(path: str | Path) -> str:
    """The source text of the app file ``path``, or :class:`InvalidDataflow` saying why it cannot be read."""
    path = Path(path)
    hint = "pass the path of a Python file that defines an App"
    if path.is_dir():
        msg = f"app file {path} is a directory; pass the app's .py file"
        raise InvalidDataflow(msg)
    if not path.exists():
        msg = f"app file {path} does not exist; {hint}"
        raise InvalidDataflow(msg)
    if not path.is_file():
        msg = f"app file {path} is not a regular file; {hint}"
        raise InvalidDataflow(msg)
    return read_text(path, "app file", InvalidDataflow, hint)


def load_app_source(source: str, filename: str = "<app>", attribute: str | None = None) -> App:
    """Execute app source code and return its :class:`App`.

    Its module is in ``sys.modules`` while it runs (dataclasses look their module up there) and stays there
    only if it defines the app: a source that fails to load leaves nothing behind.
    """
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    module = types.ModuleType(f"spanedge_app_{digest}")
    module.__file__ = filename
    earlier = sys.modules.get(module.__name__)
    sys.modules[module.__name__] = module
    try:
        return _load(module, source, filename, attribute)
    except BaseException:
        if sys.modules.get(module.__name__) is module:
            if earlier is None:
                del sys.modules[module.__name__]
            else:
                sys.modules[module.__name__] = earlier
        raise


def _load(module: types.ModuleType, source: str, filename: str, attribute: str | None) -> App:
    try:
        code = compile(source, filename, "exec")
    except SyntaxError as exc:
        where = filename if exc.lineno is None else f"{filename}:{exc.lineno}"
        msg = f"{where}: syntax error in app: {exc.msg}"
        raise InvalidDataflow(msg) from None
    except ValueError as exc:  # null bytes in the source (a SyntaxError from Python 3.12)
        msg = f"{filename}: not Python source: {exc}; pass the app's .py file"
        raise InvalidDataflow(msg) from None
    try:
        exec(code, module.__dict__)  # noqa: S102 - the user's own app
    except InvalidDataflow:
        raise
    except (Exception, SystemExit) as exc:  # the user's module failed at import: say where, in their file, and why
        # KeyboardInterrupt is let through, so Ctrl-C while an app loads stops the command
        raise InvalidDataflow(_import_failure(exc, filename)) from None
    apps = {k: v for k, v in vars(module).items() if isinstance(v, App)}
    if attribute is not None:
        if attribute not in apps:
            msg = f"{filename} has no App named {attribute!r} (found: {', '.join(apps) or 'none'})"
            raise InvalidDataflow(msg)
        return apps[attribute]
    if not apps:
        msg = f"{filename} must define exactly one App (found: none); create one at module level: app = App('name')"
        raise InvalidDataflow(msg)
    if len(apps) > 1:
        msg = f"{filename} must define exactly one App (found: {', '.join(apps) or 'none'}); pick one with --app-name"
        raise InvalidDataflow(msg)
    return next(iter(apps.values()))


def _import_failure(exc: Exception | SystemExit, filename: str) -> str:
    """One line of cause, with the first and last frame of the app's own file in the traceback."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    where = f"{filename}:{frames[0].lineno}" if frames else filename
    cause = _cause(exc)
    msg = f"{where}: the app raised {type(exc).__name__} while loading" + (f": {cause}" if cause else "")
    if len(frames) > 1:
        msg += f" (in {frames[-1].name} at {filename}:{frames[-1].lineno})"
    if isinstance(exc, ImportError):
        msg += "; is that module installed where the app runs?"
    elif isinstance(exc, SystemExit):
        msg += "; an app file must not exit when imported: put that code under if __name__ == '__main__'"
    return msg


def _cause(exc: Exception | SystemExit) -> str:
    """The exception's message; for ``sys.exit(code)`` the exit code, or the message it was given."""
    if isinstance(exc, SystemExit) and (exc.code is None or isinstance(exc.code, int)):
        return f"exit code {0 if exc.code is None else exc.code}"
    return " ".join(str(exc).split())  # one line, even for a multi-line message


def source_hash(source: str) -> str:
    """The SHA-256 of an app's source code."""
    return hashlib.sha256(source.encode()).hexdigest()


__all__ = ["load_app", "load_app_source", "read_app_source", "source_hash"]
