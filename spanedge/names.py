r"""The names that enter SpanEdge from users: app names and site names.

Both end up in MQTT topics (``spanedge/v1/<app>/<stream>/<site>``), REST paths
(``/apps/<app>``) and file names on the hub and the agents (``apps/<app>.json``,
``agent-<site>/``), so both follow one pattern, :data:`NAME_PATTERN`::

    ^[a-z0-9][a-z0-9_-]{0,62}$

that is, 1 to 63 characters, each a lowercase ASCII letter, a digit, ``_`` or
``-``, the first one a letter or a digit. Examples: ``cold-chain``,
``smart_farm``, ``truck-7``, ``7eleven``.

Uppercase letters are refused, not folded: names are compared exactly, and no
two valid names differ only by case, so they cannot collide on a file system
that ignores case (macOS, Windows). The app name ``control`` is reserved: its
data topics would fall under the control topics ``spanedge/v1/control/...``.

A valid name is a safe file name as it is: no ``/`` or ``\``, no ``.`` (so
never ``.``, ``..``, a hidden file or an extension), no leading ``-`` (never
read as a command-line option), no MQTT wildcard (``+``, ``#``), no space or
control character, ASCII only (no Unicode look-alikes or normalisation), and
short enough for any file system once a suffix is added. :func:`file_stem` is
therefore the identity on valid names, which makes it injective; it refuses
every other string rather than rewriting it. The site names ``plan``,
``heartbeat``, ``probe`` and ``presence`` are reserved: a site's data topics
``spanedge/v1/+/+/<site>``, which the broker lets it publish, would include
every site's control topic of that kind.

Stream and operator names (:func:`check_stream_name`) are the fourth level of
a data topic (``spanedge/v1/<app>/<operator>/<site>``) and the first part of
a replica id (``<operator>@<site>``): 1 to :data:`MAX_STREAM_NAME_BYTES` bytes
of UTF-8, without ``/``, ``+``, ``#``, ``@`` or a character MQTT refuses
(:func:`spanedge.topics.text_problem`), and not ``dlq``, the level of the
dead-letter topics. Examples: ``readings``, ``to_celsius``, ``fleet_max``.
"""

from __future__ import annotations

import re

from spanedge import topics
from spanedge.errors import InvalidName

#: The pattern of app and site names (anchored; match it against the whole name).
NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
#: App names follow :data:`NAME_PATTERN`, except the reserved names.
APP_NAME_PATTERN = NAME_PATTERN
#: Site names follow :data:`NAME_PATTERN`.
SITE_NAME_PATTERN = NAME_PATTERN
MAX_NAME_LENGTH = 63
#: App names that match the pattern but are refused, and why.
RESERVED_APP_NAMES: dict[str, str] = {
    "control": "its topics would fall under the control topics spanedge/v1/control/...",
}
#: Site names that match the pattern but are refused, and why.
RESERVED_SITE_NAMES: dict[str, str] = {
    kind: f"its data topics spanedge/v1/+/+/{kind} would include every site's control topic "
    f"spanedge/v1/control/<site>/{kind}"
    for kind in topics.CONTROL_KINDS
}
#: The most bytes of UTF-8 in a stream or operator name (room for the site and a suffix in a file name).
MAX_STREAM_NAME_BYTES = 100
#: Stream and operator names that are refused, and why.
RESERVED_STREAM_NAMES: dict[str, str] = {"dlq": "spanedge/v1/<app>/dlq/<site> is the app's dead-letter topic"}
_STREAM_SEPARATORS = {
    "/": "separates MQTT topic levels",
    "+": "is an MQTT wildcard",
    "#": "is an MQTT wildcard",
    "@": "separates the operator from the site in a replica id",
}
_STREAM_RULE = (
    f"1 to {MAX_STREAM_NAME_BYTES} bytes of UTF-8 without '/', '+', '#', '@' or control characters, "
    "other than 'dlq' (e.g. 'readings' or 'to_celsius')"
)

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_ALLOWED = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_-")
_RULE = "1 to 63 lowercase letters, digits, '_' or '-', starting with a letter or digit (pattern ^[a-z0-9][a-z0-9_-]{0,62}$)"


def _shown(name: str) -> str:
    """``repr`` of a name, cut short if it is long."""
    return repr(name) if len(name) <= 40 else f"{name[:40]!r}... ({len(name)} characters)"


def _problem(name: str) -> str:
    """What is wrong with ``name``, which does not match :data:`NAME_PATTERN`."""
    if not name:
        return "is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"has {len(name)} characters, more than {MAX_NAME_LENGTH}"
    for position, char in enumerate(name):
        if char in _ALLOWED:
            continue
        if "A" <= char <= "Z":
            return "has uppercase letters (names are lowercase, compared exactly)"
        return f"contains {char!r} (U+{ord(char):04X}) at position {position}"
    return f"starts with {name[0]!r}"


def _suggestion(name: str) -> str:
    """A valid name close to ``name``, as a hint (never used in its place), or ``""``."""
    close = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).lstrip("-_")[:MAX_NAME_LENGTH]
    return f"; did you mean {close!r}?" if close and close != name and _NAME.fullmatch(close) else ""


def name_problem(name: object, kind: str) -> str | None:
    """What is wrong with an app or site name, as a sentence naming it and the rule; ``None`` if it is valid.

    Args:
        name: the name as it came in (any value).
        kind: ``"app"`` or ``"site"`` (their reserved names differ), or another word for the pattern alone.
    """
    if not isinstance(name, str):
        return f"{kind} name must be a string, got {type(name).__name__} {name!r:.40}; use {_RULE}"
    if _NAME.fullmatch(name) is None:
        return f"{kind} name {_shown(name)} {_problem(name)}; use {_RULE}{_suggestion(name)}"
    reserved = {"app": RESERVED_APP_NAMES, "site": RESERVED_SITE_NAMES}.get(kind, {})
    if name in reserved:
        return f"{kind} name {name!r} is reserved ({reserved[name]}); choose another name"
    return None


def label_problem(key: object, value: object) -> str | None:
    """What is wrong with a site label ``key: value``, as a sentence naming it and the rule; ``None`` if it is valid.

    Label keys and values follow :data:`NAME_PATTERN`, like site names (``fleet: north``, ``kind: truck``):
    a staged rollout selects sites by them, on the command line and in REST queries.
    """
    problem = name_problem(key, "label key")
    if problem is None:
        problem = name_problem(value, f"value of label {key!r}:")
    return problem


def stream_name_problem(name: object, kind: str = "stream") -> str | None:
    """What is wrong with a stream or operator name, as a sentence naming it and the rule; ``None`` if it is valid.

    Args:
        name: the name as it came in (any value).
        kind: ``"stream"`` or ``"operator"``, for the message.
    """
    if not isinstance(name, str):
        return f"{kind} name must be a string, got {type(name).__name__} {name!r:.40}; use {_STREAM_RULE}"
    problem = "is empty" if not name else topics.text_problem(name)
    if problem is None and len(name.encode()) > MAX_STREAM_NAME_BYTES:
        problem = f"has {len(name.encode())} bytes of UTF-8, more than {MAX_STREAM_NAME_BYTES}"
    for char, role in _STREAM_SEPARATORS.items():
        if problem is None and char in name:
            problem = f"contains {char!r} at position {name.index(char)}, which {role}"
    if problem is None and name in RESERVED_STREAM_NAMES:
        problem = f"is reserved ({RESERVED_STREAM_NAMES[name]})"
    return None if problem is None else f"{kind} name {_shown(name)} {problem}; use {_STREAM_RULE}"


def _check(name: object, kind: str, where: str) -> str:
    problem = name_problem(name, kind)
    if problem is not None:
        msg = f"{where}: {problem}"
        raise InvalidName(msg)
    return str(name)


def check_app_name(name: object, where: str) -> str:
    """Return ``name`` if it is a valid app name, else raise with what is wrong and how to fix it.

    Args:
        name: the name as it came in (any value: it may come from JSON).
        where: where it came in, for the message, e.g. ``"App(...) at app.py:3"`` or ``"POST /apps"``.

    Raises:
        InvalidName: ``name`` does not match :data:`APP_NAME_PATTERN` or is reserved.
    """
    return _check(name, "app", where)


def check_site_name(name: object, where: str) -> str:
    """Return ``name`` if it is a valid site name, else raise with what is wrong and how to fix it.

    Args:
        name: the name as it came in.
        where: where it came in, for the message, e.g. ``"sites.yaml"`` or ``"--site"``.

    Raises:
        InvalidName: ``name`` does not match :data:`SITE_NAME_PATTERN` or is reserved.
    """
    return _check(name, "site", where)


def check_stream_name(name: object, where: str, kind: str = "stream") -> str:
    """Return ``name`` if it is a valid stream or operator name, else raise with what is wrong and how to fix it.

    Args:
        name: the name as it came in.
        where: where it came in, for the message, e.g. ``"source at app.py:7"``.
        kind: ``"stream"`` or ``"operator"``, for the message.

    Raises:
        InvalidName: ``name`` breaks the rule of the module docstring.
    """
    problem = stream_name_problem(name, kind)
    if problem is not None:
        msg = f"{where}: {problem}"
        raise InvalidName(msg)
    return str(name)


def file_stem(name: str) -> str:
    """The file-name stem of a checked app or site name: the name itself.

    Valid names are safe file names (see the module docstring), so the mapping
    is the identity, hence injective; anything else is refused, never rewritten.

    Raises:
        InvalidName: ``name`` does not match :data:`NAME_PATTERN`.
    """
    return _check(name, "app or site", "file name")
