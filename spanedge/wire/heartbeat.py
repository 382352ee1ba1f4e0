"""The heartbeat: what an agent reports to the hub every few seconds, on ``spanedge/v1/control/<site>/heartbeat``.

On the wire it is JSON, ``v`` (the format version) first, then the fields
of :class:`Heartbeat`; a field that is empty or unknown (None) is left out::

    {"v": 1, "site": "barn", "ts": 1700000000.0, "apps": ["farm"],
     "operators": {"readings@barn": {"in": 120, "out": 120, "rate_in": 12.0, "rate_out": 12.0}},
     "outbox": {"records": 0, "bytes": 0, "dropped": 0, "sent": 120}, "dlq": 0, "late": 0, ...}

The agent writes it (:mod:`edge_agent.heartbeat`), the hub reads it with
:func:`decode` (:mod:`hub.control.registry`, :mod:`hub.control.site_health`).
A heartbeat that is not a JSON object, names another site or has another
format version is refused; a report field (or, in an object, an entry) of
the wrong type (a gateway running other code, say) is left out of the
decoded heartbeat and named, so one bad counter never hides the site's
liveness and other reports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, get_args, get_origin

import msgspec

from spanedge.numbers import Finite, NonNegative

Count = Annotated[int, msgspec.Meta(ge=0)]

VERSION = 1
"""The format version of the heartbeat, its ``v`` field (a heartbeat without one is read as this version)."""

COUNTERS = ("dlq", "late", "errors")
"""The counters a heartbeat's ``counters`` gives per app."""


class Heartbeat(msgspec.Struct, kw_only=True, omit_defaults=True, frozen=True, tag_field="v", tag=VERSION):
    """One heartbeat of a site.

    Attributes:
        site: the site sending it.
        ts: when it was sent (seconds since the epoch, the agent's clock).
        apps: the apps running at the site.
        operators: per replica, ``in``/``out`` record counts and ``rate_in``/``rate_out`` records/s.
        watermark_lag_s: the largest watermark lag of the site's pipelines.
        outbox: the outbox's ``records``, ``bytes``, ``dropped`` and ``sent``.
        dlq: records sent to the dead-letter topic.
        late: records behind the watermark.
        overload_dropped: records the agent's inbox dropped while overloaded.
        cpu_percent: the agent's CPU use (100 is one core).
        rss_bytes: the agent's resident memory.
        latency: per peer, ``rtt_ms``, ``p95_ms`` and ``samples`` of its probes.
        clock_offset_ms: the agent's clock minus the hub's.
        cpu_budget: the cores SpanEdge may use at the site now, when less than declared.
        handed_over: the handovers whose part the site has finished, with what it sent last.
        state_bytes: per app, the bytes of state each window replica holds.
        complete: per app, the event time below which the site sends the hub nothing more (None: idle).
        delivered: per app, the event time below which the site delivered every result.
        key_spread: per app, each window replica's recent records by bucket of its key hash space.
        plan_expired: the plan the site runs is past its expiry (the hub has not re-issued it).
        result_latency: per app, per local sink that wrote a result in the last minute, ``p50_ms`` and
            ``p95_ms`` of its results' latency (event time to written) and ``results``, how many
            (:mod:`spanedge.result_latency`). Added within format version 1: a reader that predates it ignores it.
        connectors: per connector stream (``<stream>``, or ``<stream>@<site>`` for another site's) and
            connector sink (``sink <app>/<operator>``): ``server``, ``up``, ``reconnects`` (failed attempts
            since the agent started) and ``last_error`` (the last failure, kept after a recovery).
            Added within format version 1.
        sources: per app, the SHA-256 of the source the site's pipeline runs (the version a staged rollout
            confirms). Added within format version 1, like ``result_latency``.
        models: per app, per model the site holds: ``held``, the newest version installed, and, once it scored,
            ``version`` (the one that scored the newest records), ``records`` in the drift window, ``psi`` (the
            largest per-feature population stability index against the version's training statistics),
            ``psi.<feature>``, and where labels came ``error`` and ``labelled`` (:mod:`spanedge.models.drift`).
            Added within format version 1.
        counters: per app the site runs, ``dlq`` (its dead letters), ``late`` (its late records) and ``errors``
            (its records a user's function raised on, dead-lettered too), each counted since the agent started;
            ``dlq`` and ``late`` above count every app's together. Added within format version 1: a heartbeat
            that runs an app without counting it here comes from an older agent.
    """

    site: str | None = None
    ts: Finite | None = None
    apps: list[str] = []
    operators: dict[str, dict[str, Count | NonNegative]] = {}
    watermark_lag_s: Finite | None = None
    outbox: dict[str, int] = {}
    dlq: int | None = None
    late: int | None = None
    overload_dropped: int | None = None
    cpu_percent: NonNegative | None = None
    rss_bytes: int | None = None
    latency: dict[str, dict[str, Finite | None]] = {}
    clock_offset_ms: Finite | None = None
    cpu_budget: NonNegative | None = None
    handed_over: list[dict[str, Any]] = []
    state_bytes: dict[str, dict[str, Count]] = {}
    complete: dict[str, Finite | None] = {}
    delivered: dict[str, Finite] = {}
    key_spread: dict[str, dict[str, dict[str, NonNegative]]] = {}
    plan_expired: bool = False
    result_latency: dict[str, dict[str, dict[str, NonNegative]]] = {}
    connectors: dict[str, dict[str, bool | Count | str]] = {}
    sources: dict[str, str] = {}
    models: dict[str, dict[str, dict[str, Finite]]] = {}
    counters: dict[str, dict[str, Count]] = {}


_FIELDS = msgspec.structs.fields(Heartbeat)
_encoder = msgspec.json.Encoder()


def encode(beat: Heartbeat) -> bytes:
    """Serialise a heartbeat."""
    return _encoder.encode(beat)


def to_builtins(beat: Heartbeat) -> dict[str, Any]:
    """A heartbeat as plain JSON-ready data, as it goes on the wire."""
    data: dict[str, Any] = msgspec.to_builtins(beat)
    return data


def decode(payload: bytes | bytearray | Mapping[str, Any]) -> tuple[Heartbeat, list[str]]:
    """Parse a heartbeat (its bytes, or their parsed JSON); return it and the report fields left out.

    Returns:
        The heartbeat, and per field of the wrong type, ``"<field>: <what is wrong>"``.

    Raises:
        ValueError: not JSON, not a JSON object, a ``site`` that is not a string, or another format version.
    """
    if isinstance(payload, bytes | bytearray):
        try:
            data: Any = msgspec.json.decode(payload)
        except msgspec.DecodeError as exc:
            msg = f"not JSON ({exc})"
            raise ValueError(msg) from None
    else:
        data = payload
    if not isinstance(data, Mapping):
        msg = "not a JSON object"
        raise ValueError(msg)
    version = data.get("v", VERSION)
    if type(version) is not int or version != VERSION:
        msg = f"heartbeat format version {version!r} is not {VERSION}; run the hub's release on this agent"
        raise ValueError(msg)
    site = data.get("site")
    if site is not None and not isinstance(site, str):
        msg = f"its 'site' field is {site!r}, not a site name"
        raise ValueError(msg)
    try:
        return msgspec.convert(data, Heartbeat), []
    except msgspec.ValidationError:
        pass
    fields: dict[str, Any] = {}
    dropped: list[str] = []
    for field in _FIELDS:
        if field.encode_name in data:
            value = _lenient(data[field.encode_name], field.type, field.encode_name, dropped)
            if value is not _DROPPED:
                fields[field.name] = value
    return Heartbeat(**fields), dropped


_DROPPED = object()


def _lenient(value: Any, kind: Any, where: str, dropped: list[str]) -> Any:
    """``value`` as ``kind``; in an object, only the entries of the wrong type are dropped (named in ``dropped``)."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        if get_origin(kind) is dict and isinstance(value, Mapping):
            inner = get_args(kind)[1]
            kept = ((k, _lenient(v, inner, f"{where}.{k}", dropped)) for k, v in value.items() if isinstance(k, str))
            return {k: v for k, v in kept if v is not _DROPPED}
        dropped.append(f"{where}: {exc}")
        return _DROPPED


__all__ = ["COUNTERS", "VERSION", "Heartbeat", "decode", "encode", "to_builtins"]
