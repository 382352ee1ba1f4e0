"""Models of files users write (``sites.yaml``) and their validation, with errors that name the place.

The models are :class:`msgspec.Struct` classes: immutable, unknown fields refused. They are
checked by :func:`convert`, never by their constructor (which runs only ``__post_init__``).
A check in ``__post_init__`` about one field raises ``ValueError("<field path>: <problem>")``,
e.g. ``"links[0].between: unknown site 'x'"``, and the error points at that field; a mapping key
is written as a JSON string in brackets (:func:`key_path`), e.g. ``'sites["Truck-9"]: ...'``.
"""

from __future__ import annotations

import enum
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Self, TypeVar

import msgspec
import yaml

from spanedge.errors import InvalidSites

T = TypeVar("T")
Place = tuple[str | int, ...]
"""A place in a document: mapping keys and list indices, from the top."""

_AT = re.compile(r"^(?P<problem>.*) - at `(?P<key>key` in `)?\$(?P<path>[^`]*)`$", re.DOTALL)
_KEY = r'\[(?P<key>"(?:[^"\\]|\\.)*")\]'
_STEP = re.compile(r"\.(?P<field>[A-Za-z_]\w*)|\[(?P<index>\d+)\]|(?P<entry>\[\.\.\.\])|" + _KEY)
_FIELD_PATH = re.compile(
    r'^(?P<path>[A-Za-z_]\w*(?:\[\d+\]|\["(?:[^"\\]|\\.)*"\]|\.[A-Za-z_]\w*)*): (?P<problem>.*)$', re.DOTALL
)
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]*)`$")


class FileModel(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """Base of the models of user-written files: immutable, unknown fields are errors."""

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` (field name to new value); ``__post_init__`` checks run again, field types are not."""
        return msgspec.structs.replace(self, **changes)


def convert(
    data: Any,
    model: type[T],
    where: str,
    *,
    title: str,
    prefix: Place = (),
    lines: Mapping[Place, int] | Callable[[], Mapping[Place, int]] | None = None,
    dec_hook: Callable[[type, Any], Any] | None = None,
) -> T:
    """Validate ``data`` into ``model``.

    Args:
        data: the document (or section of it) as YAML gave it.
        model: the struct to build.
        where: the file name for errors.
        title: what the document is, for errors ("invalid <title>:").
        prefix: the place of ``data`` in its file, e.g. ``("simulation",)``.
        lines: the line of every place in the file, if known (see :func:`yaml_lines`), or what finds
            them, called only for an error.
        dec_hook: builds the custom types of ``model`` (see :func:`msgspec.convert`).

    Raises:
        InvalidSites: saying the file, line, place, what is wrong, what was there and the fix.
    """
    try:
        return msgspec.convert(data, model, dec_hook=dec_hook)
    except msgspec.ValidationError as exc:
        found = lines() if callable(lines) else lines
        problem = _describe(str(exc), data, model, dec_hook, where, prefix, found or {})
    msg = f"invalid {title}:\n  {problem}"
    raise InvalidSites(msg) from None


def key_path(field: str, key: str) -> str:
    """The field path of the entry ``key`` of the mapping ``field``, for a ``__post_init__`` error."""
    return f"{field}[{json.dumps(key)}]"


def yaml_lines(node: Any) -> dict[Place, int]:
    """The 1-based line of every mapping key and list item under a :func:`yaml.compose` node."""
    out: dict[Place, int] = {}

    def visit(node: yaml.Node, path: Place) -> None:
        out.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = (*path, key.value)
                out[child] = key.start_mark.line + 1
                visit(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                visit(item, (*path, i))

    if node is not None:
        visit(node, ())
    return out


def render(path: Place) -> str:
    """``("sites", "a", "streams")`` as ``sites.a.streams``, list indices as ``[i]``."""
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else f".{step}" if out else str(step)
    return out or "(top level)"


_NOTHING = object()


class _Locator:
    """Where a msgspec error points: the path with mapping keys filled in, the value and the type there."""

    def __init__(self, data: Any, model: Any, dec_hook: Callable[[type, Any], Any] | None) -> None:
        self.path: list[str | int] = []
        self.value: Any = data
        self.kind: Any = model
        self.dec_hook = dec_hook

    def field(self, name: str) -> None:
        struct = _member(self.kind, lambda t: isinstance(t, type) and issubclass(t, msgspec.Struct))
        fields = {f.name: f.type for f in msgspec.structs.fields(struct)} if struct else {}
        self.path.append(name)
        self.kind = fields.get(name)
        self.value = self.value.get(name, _NOTHING) if isinstance(self.value, dict) else _NOTHING

    def key(self, name: str) -> None:
        """Step into the entry ``name`` of the mapping here."""
        args = typing.get_args(_member(self.kind, lambda t: typing.get_origin(t) is dict))
        self.path.append(name)
        self.kind = args[1] if args else None
        self.value = self.value.get(name, _NOTHING) if isinstance(self.value, dict) else _NOTHING

    def index(self, i: int) -> None:
        seq = _member(self.kind, lambda t: typing.get_origin(t) in (list, tuple))
        args = typing.get_args(seq)
        if typing.get_origin(seq) is tuple and args and args[-1] is not Ellipsis:
            self.kind = args[i] if i < len(args) else None
        else:
            self.kind = args[0] if args else None
        self.path.append(i)
        ok = isinstance(self.value, list | tuple) and i < len(self.value)
        self.value = self.value[i] if ok else _NOTHING

    def entry(self, key_only: bool = False) -> bool:
        """Step into the first entry of a mapping that fails (to its key, staying at the mapping, if ``key_only``)."""
        args = typing.get_args(_member(self.kind, lambda t: typing.get_origin(t) is dict)) or (Any, Any)
        if not isinstance(self.value, dict):
            return False
        for key, value in self.value.items():
            if key_only and self._fails(key, args[0]):
                self.kind, self.value = args[0], key
                return True
            if not key_only and self._fails(value, args[1]):
                self.path.append(key)
                self.kind, self.value = args[1], value
                return True
        return False

    def _fails(self, value: Any, kind: Any) -> bool:
        try:
            msgspec.convert(value, kind, dec_hook=self.dec_hook)
        except msgspec.ValidationError:
            return True
        return False

    def fields(self) -> list[str]:
        """The field names of the struct here."""
        struct = _member(self.kind, lambda t: isinstance(t, type) and issubclass(t, msgspec.Struct))
        return [f.name for f in msgspec.structs.fields(struct)] if struct else []

    def walk(self, path: str) -> bool:
        """Follow a msgspec path (``.a[0][...]``); False where it cannot be followed."""
        for step in _STEP.finditer(path):
            if step["field"] is not None:
                self.field(step["field"])
            elif step["index"] is not None:
                self.index(int(step["index"]))
            elif step["key"] is not None:
                self.key(json.loads(step["key"]))
            elif not self.entry():
                return False
        return True


def _member(kind: Any, wanted: Callable[[Any], bool]) -> Any:
    """The type in ``kind`` (through ``Annotated`` and unions) that ``wanted`` accepts, or None."""
    while typing.get_origin(kind) is typing.Annotated:
        kind = typing.get_args(kind)[0]
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return next((m for m in (_member(a, wanted) for a in typing.get_args(kind)) if m is not None), None)
    return kind if wanted(kind) else None


def _describe(
    error: str,
    data: Any,
    model: Any,
    dec_hook: Callable[[type, Any], Any] | None,
    where: str,
    prefix: Place,
    lines: Mapping[Place, int],
) -> str:
    """One line: ``file:line: place: problem (got value); hint``."""
    match = _AT.match(error)
    problem = match["problem"] if match else error
    locator = _Locator(data, model, dec_hook)
    exact = locator.walk(match["path"]) if match else True
    if match and match["key"] and exact:
        exact = locator.entry(key_only=True)
        problem = f"key {locator.value!r}: {problem}" if exact else f"a key: {problem}"
    hint = ""
    if (
        exact
        and (found := _FIELD_PATH.match(problem))
        and found["path"].split("[")[0].split(".")[0] in locator.fields()
    ):
        locator.walk("." + found["path"])
        problem = found["problem"]
    elif exact and (unknown := _UNKNOWN.match(problem)):
        known = locator.fields()
        locator.field(unknown["name"])
        problem = "unknown field"
        hint = f"; remove it or fix its spelling (fields here: {', '.join(known)})"
    elif exact and (missing := _MISSING.match(problem)):
        locator.field(missing["name"])
        problem = "required field is missing; add it"
    enum_type = _member(locator.kind, lambda t: isinstance(t, type) and issubclass(t, enum.Enum))
    if enum_type is not None:
        hint = f"; use one of: {', '.join(str(m.value) for m in enum_type)}"
    path = (*prefix, *locator.path)
    line = next((lines[path[:i]] for i in range(len(path), -1, -1) if path[:i] in lines), None)
    location = f"{where}:{line}" if line is not None else where
    if not exact:  # msgspec's own words, which name the place without mapping keys
        return f"{location}: {render(path)}: {error}"
    shown = _NOTHING if locator.value is _NOTHING or isinstance(locator.value, dict) else _short(locator.value)
    got = "" if shown is _NOTHING or str(shown) in problem else f" (got {shown})"
    return f"{location}: {render(path)}: {problem}{got}{hint}"


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
