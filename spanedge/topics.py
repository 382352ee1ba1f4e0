"""MQTT topic names shared by agents, the hub and the simulator."""

from __future__ import annotations

PREFIX = "spanedge/v1"


def data(app: str, stream: str, site: str) -> str:
    """Edge-to-hub data: batches of records of ``stream`` produced at ``site``."""
    return f"{PREFIX}/{app}/{stream}/{site}"


def dlq(app: str, site: str) -> str:
    """Records of ``app`` at ``site`` that could not be processed, with the reason."""
    return f"{PREFIX}/{app}/dlq/{site}"


#: The kinds of control topic: a spoke's ``plan``, ``heartbeat`` and ``probe``; a hub site's ``presence``.
CONTROL_KINDS = ("plan", "heartbeat", "probe", "presence")


def control(site: str, kind: str) -> str:
    """Control topics of a site: ``plan``, ``heartbeat``, ``probe``, or a hub site's ``presence``."""
    if kind not in CONTROL_KINDS:
        msg = f"control topic kind must be one of {', '.join(CONTROL_KINDS)}, got {kind!r}"
        raise ValueError(msg)
    return f"{PREFIX}/control/{site}/{kind}"


def parse_data(topic: str) -> tuple[str, str, str] | None:
    """Split a data topic into ``(app, stream, site)``; ``None`` if it is not one."""
    parts = topic.split("/")
    if len(parts) != 5 or "/".join(parts[:2]) != PREFIX or parts[2] == "control" or parts[3] == "dlq":
        return None
    return parts[2], parts[3], parts[4]


# -- the rules of topics and topic filters users write ----------------------

#: The most bytes an MQTT topic or topic filter may have in UTF-8.
MAX_TOPIC_BYTES = 65535
#: The first topic level SpanEdge keeps for its own topics.
RESERVED_ROOT = PREFIX.split("/", 1)[0]


def text_problem(text: str) -> str | None:
    """What keeps ``text`` from being an MQTT string a broker accepts, or ``None``.

    Mosquitto drops a client that sends a topic with a NUL, a control
    character (U+0001 to U+001F, U+007F to U+009F), a UTF-16 surrogate or a
    non-character (U+FDD0 to U+FDEF, U+xFFFE, U+xFFFF), or one over
    :data:`MAX_TOPIC_BYTES` bytes of UTF-8.
    """
    for position, char in enumerate(text):
        point = ord(char)
        if (
            point <= 0x1F
            or 0x7F <= point <= 0x9F
            or 0xD800 <= point <= 0xDFFF
            or 0xFDD0 <= point <= 0xFDEF
            or (point & 0xFFFE) == 0xFFFE
        ):
            return f"contains {char!r} (U+{point:04X}) at position {position}, which MQTT does not allow"
    size = len(text.encode())
    if size > MAX_TOPIC_BYTES:
        return f"is {size} bytes in UTF-8, more than the {MAX_TOPIC_BYTES} MQTT allows"
    return None


def _common_problem(topic: str, example: str) -> str | None:
    """What is wrong with a topic or filter for SpanEdge, whatever its wildcards."""
    if not topic:
        return f"is empty; write the full topic, e.g. {example!r}"
    bad = text_problem(topic)
    if bad is not None:
        return bad
    if topic.startswith("$"):
        return f"starts with '$', which marks the broker's own topics (such as $SYS/...); use e.g. {example!r}"
    return None


def filter_problem(topic_filter: str) -> str | None:
    """What is wrong with an MQTT topic filter a site's stream subscribes to, or ``None`` if it is valid.

    A valid filter follows MQTT 3.1.1 and 5: not empty, no NUL (:func:`text_problem`),
    ``#`` only as the whole last level, ``+`` only as a whole level; and it
    matches no topic under ``spanedge/``, which SpanEdge keeps for its own
    topics: its first level is neither ``spanedge`` nor a wildcard.
    """
    problem = _common_problem(topic_filter, "sensors/+/temp")
    if problem is not None:
        return problem
    levels = topic_filter.split("/")
    for i, level in enumerate(levels, start=1):
        if "#" in level and (level != "#" or i != len(levels)):
            where = f"inside level {i} ({level!r})" if level != "#" else f"at level {i} of {len(levels)}"
            return f"has '#' {where}; '#' must be a whole level and the last one, e.g. 'trucks/7/#'"
        if "+" in level and level != "+":
            return f"has '+' inside level {i} ({level!r}); '+' must be a whole level, e.g. 'trucks/+/temp'"
    if levels[0] in (RESERVED_ROOT, "+", "#"):
        return (
            f"matches topics under '{RESERVED_ROOT}/', which SpanEdge keeps for its own data and control topics; "
            "start the filter with a fixed first level, e.g. 'sensors/+/temp'"
        )
    return None


def topic_problem(topic: str) -> str | None:
    """What is wrong with an MQTT topic a sink publishes to, or ``None`` if it is valid.

    A valid topic is a valid filter (:func:`filter_problem`) without wildcards:
    a message is published to one topic.
    """
    problem = _common_problem(topic, "cold-chain/alerts")
    if problem is not None:
        return problem
    for wildcard in "+#":
        if wildcard in topic:
            return f"contains {wildcard!r}, an MQTT wildcard; a sink publishes to one topic, e.g. 'cold-chain/alerts'"
    return filter_problem(topic)
