"""YAML that users write, read fast and bounded: libyaml's parser, aliases limited, lines found on demand.

:func:`read_yaml` composes the document once with PyYAML's C loader (the
pure-Python one where libyaml is missing), refuses an alias structure that
would expand far beyond what the file writes (an "alias bomb") or that
contains itself, then builds the data from the same nodes. The line of every
place (:meth:`YamlDocument.lines`) is taken from those nodes only when an error
needs it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from spanedge.file_models import Place, yaml_lines

#: A document may expand to this many values through its aliases, whatever its size.
MAX_EXPANDED_VALUES = 1_000_000
#: A document may also expand to this many times the values it writes.
ALIAS_GROWTH = 10

_Base: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc]
    """The safe loader, remembering the tag of each plain scalar: a fleet's file repeats most of them."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._tags: dict[tuple[str, Any], str] = {}

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: Any) -> str:
        if kind is not yaml.ScalarNode:
            return str(_Base.resolve(self, kind, value, implicit))
        key = (value, implicit)
        tag = self._tags.get(key)
        if tag is None:
            tag = self._tags[key] = _Base.resolve(self, kind, value, implicit)
        return tag


class YamlDocument:
    """A YAML document as data, with the line of each place in it found when asked."""

    def __init__(self, data: Any, node: yaml.Node | None) -> None:
        """Keep ``data`` and the ``node`` it was built from."""
        self.data = data
        self._node = node
        self._lines: dict[Place, int] | None = None

    def lines(self) -> dict[Place, int]:
        """The 1-based line of every mapping key and list item (see :func:`spanedge.file_models.yaml_lines`)."""
        if self._lines is None:
            self._lines = yaml_lines(self._node)
        return self._lines


def read_yaml(
    text: str, where: str, error: Callable[[str], Exception], *, invalid: str = "not valid YAML", show_line: bool = True
) -> YamlDocument:
    """Parse one YAML document of ``text`` with the safe loader, its aliases bounded.

    Args:
        text: the document.
        where: the file name for errors.
        error: builds the exception raised, from its message.
        invalid: what a syntax error message says the text is, before the problem.
        show_line: whether errors give the line after ``where`` (not for a one-line option value).

    Raises:
        Exception: (built by ``error``) the text is not valid YAML, an alias refers to a node that contains
            it, or the aliases expand the document past :data:`MAX_EXPANDED_VALUES` and :data:`ALIAS_GROWTH`
            times the values it writes; the message names ``where`` and the line.
    """
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is not None and "*" in text:  # an alias is written with a '*'
            check_aliases(node, where, error, show_line=show_line)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None and show_line else ""
        msg = f"{where}{line}: {invalid}: {getattr(exc, 'problem', None) or exc}"
        raise error(msg) from None
    finally:
        loader.dispose()
    return YamlDocument(data, node)


def check_aliases(root: yaml.Node, where: str, error: Callable[[str], Exception], *, show_line: bool = True) -> None:
    """Raise ``error`` if the aliases under ``root`` make a cycle or expand it past the bounds of :func:`read_yaml`.

    Each node is visited once: an aliased node counts its expanded size once, then
    every alias adds that size, so a bomb is measured without being expanded.
    """
    expanded: dict[int, int] = {}
    open_nodes: set[int] = set()  # the nodes whose children are being counted: the path from the root
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            expanded[key] = 1 + sum(expanded[id(child)] for child in _children(node))
            continue
        if key in expanded:
            continue
        if key in open_nodes:
            line = f":{node.start_mark.line + 1}" if show_line else ""
            msg = (
                f"{where}{line}: a YAML alias refers to the anchored value that contains it, "
                "which would repeat it without end; write the value out instead"
            )
            raise error(msg)
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in expanded)
    written = len(expanded)
    limit = max(MAX_EXPANDED_VALUES, ALIAS_GROWTH * written)
    if expanded[id(root)] > limit:
        msg = (
            f"{where}: its YAML aliases would expand it to more than {limit:,} values (it writes {written:,}); "
            "write the repeated parts out or alias fewer of them"
        )
        raise error(msg)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []
