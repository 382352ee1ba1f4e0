"""The local runtime: the operators one site runs for one app, with event time and state.

A :class:`Pipeline` is built from a plan (:func:`from_plan`) or, for tests,
from the app alone (:func:`edge_part`). Feed it raw sensor messages with
:meth:`Pipeline.process`; call :meth:`Pipeline.tick` now and then so that
an idle input still closes its windows (with ``idle_timeout``); collect what
it produced with :meth:`Pipeline.take`. It does no I/O, so the agent and
:mod:`spanedge.testing` share it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import orjson

from edge_agent.windows import FieldError, WindowState
from spanedge.app import App
from spanedge.operators import Kind, Operator, SinkSpec
from spanedge.plan import Plan, split_replica

SNAPSHOT_VERSION = 1
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that could not be processed (or came too late), with the reason."""

    reason: str
    operator: str
    payload: str
    site: str
    ts: float

    def to_json(self) -> bytes:
        """The DLQ message body."""
        return orjson.dumps(
            {
                "reason": self.reason,
                "operator": self.operator,
                "payload": self.payload,
                "site": self.site,
                "ts": self.ts,
            }
        )


@dataclass(frozen=True, slots=True)
class HubRecord:
    """A record bound for the hub, before it gets its sequence number."""

    stream: str
    site: str
    event_time: float
    key: str | None
    value: Any
    encoded: bytes


@dataclass(frozen=True, slots=True)
class SinkItem:
    """A value for a local sink."""

    operator: str
    spec: SinkSpec
    value: Any


@dataclass
class Outputs:
    """What a pipeline produced since the last :meth:`Pipeline.take`."""

    to_hub: list[HubRecord] = field(default_factory=list)
    sinks: list[SinkItem] = field(default_factory=list)
    dlq: list[DeadLetter] = field(default_factory=list)
    late: list[DeadLetter] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.to_hub or self.sinks or self.dlq or self.late)


@dataclass(eq=False)
class Node:
    """One replica running here, wired to its local successors."""

    replica: str
    op: Operator
    group: str
    children: list[Node] = field(default_factory=list)
    to_hub: bool = False
    window: WindowState | None = None
    n_in: int = 0
    n_out: int = 0


def check_idle_timeout(idle_timeout: float | None) -> None:
    """Raise ``ValueError`` unless ``idle_timeout`` is ``None`` or a finite number of seconds >= 0."""
    if idle_timeout is not None and not 0 <= idle_timeout < math.inf:
        msg = f"idle_timeout must be a number of seconds >= 0 (0 or None: off), got {idle_timeout!r}"
        raise ValueError(msg)


class Pipeline:
    """The operators of one app that run at one site.

    The watermark trails the newest event time by ``out_of_orderness`` (the
    oldest of the sources' newest event times, over the sources that have sent
    anything). With ``idle_timeout``, it also moves with the agent clock while
    no record arrives; see :meth:`tick`.

    Args:
        app: the app.
        site: the site this pipeline runs at.
        nodes: the replicas here, in topological order.
        out_of_orderness: how far (s) behind the newest event time the watermark stays.
        max_future_skew: events further ahead (s) of ``clock()`` go to the DLQ.
        idle_timeout: seconds of agent clock without a record after which :meth:`tick`
            advances the watermark with the clock; ``None`` or 0 turns this off.
        clock: the agent clock (``time.time``); tests pass a fixed one.

    Raises:
        ValueError: if ``idle_timeout`` is negative or not finite.
    """

    def __init__(
        self,
        app: App,
        site: str,
        nodes: list[Node],
        *,
        out_of_orderness: float = 0.0,
        max_future_skew: float = 300.0,
        idle_timeout: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_idle_timeout(idle_timeout)
        self.app = app
        self.site = site
        self.nodes = nodes
        self.sources = {n.replica: n for n in nodes if n.op.kind is Kind.SOURCE}
        self.windows = [n for n in nodes if n.window is not None]
        self.out_of_orderness = out_of_orderness
        self.max_future_skew = max_future_skew
        self.idle_timeout = idle_timeout or None
        self.clock = clock
        # agent clock of the last record with a usable event time (dead letters do not count);
        # until the first one, the time this pipeline was built
        self.last_record = clock()
        self.max_event_time: dict[str, float] = {}
        self.watermark = -math.inf
        self.out = Outputs()
        self.dlq_count = 0
        self.late_count = 0

    # -- intake -----------------------------------------------------------

    def process(self, source: str, payload: bytes | str, arrival: float | None = None) -> None:
        """Run one raw sensor message of source replica ``source`` through the pipeline."""
        node = self.sources[source]
        node.n_in += 1
        try:
            value = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            self._dead(f"not valid JSON: {exc}", node.op.name, payload)
            return
        field = node.op.time_field
        if field is not None and type(value) is dict:
            # the common case, kept short: a numeric, finite event time not too far ahead
            stamp: Any = value.get(field)
            kind = type(stamp)
            if (kind is float or kind is int) and stamp - stamp == 0:
                now = self.clock()
                if stamp - now <= self.max_future_skew:
                    t = float(stamp)
                    node.n_out += 1
                    self.last_record = now
                    self._emit(node, value, t, None, payload)
                    if t > self.max_event_time.get(source, -math.inf):
                        self.max_event_time[source] = t
                        self._advance()
                    return
        self.process_value(source, value, arrival, raw=payload)

    def process_value(
        self, source: str, value: Any, arrival: float | None = None, raw: bytes | str | None = None
    ) -> None:
        """Run one parsed sensor message through the pipeline (``raw`` is kept for the DLQ)."""
        node = self.sources[source]
        if raw is None:
            node.n_in += 1
        original = raw if raw is not None else orjson.dumps(value)
        op = node.op
        now = self.clock()
        if op.time_field is None:
            t = now if arrival is None else arrival
        else:
            if not isinstance(value, dict):
                self._dead(f"expected a JSON object with event-time field '{op.time_field}'", op.name, original)
                return
            stamp = value.get(op.time_field)
            if isinstance(stamp, bool) or not isinstance(stamp, int | float) or not math.isfinite(stamp):
                what = "missing" if op.time_field not in value else f"not a number ({stamp!r})"
                self._dead(
                    f"event-time field '{op.time_field}' is {what}; it must hold seconds since the epoch",
                    op.name,
                    original,
                )
                return
            t = float(stamp)
            ahead = t - now
            if ahead > self.max_future_skew:
                self._dead(
                    f"event time {t} is {ahead:.1f}s ahead of the agent clock (more than --max-future-skew "
                    f"{self.max_future_skew}s); check the device clock",
                    op.name,
                    original,
                )
                return
        node.n_out += 1
        self.last_record = now
        self._emit(node, value, t, None, original)
        if t > self.max_event_time.get(source, -math.inf):
            self.max_event_time[source] = t
            self._advance()

    # -- pushing ----------------------------------------------------------

    def _emit(self, node: Node, value: Any, t: float, key: str | None, raw: bytes | str) -> None:
        if node.to_hub:
            try:
                encoded = orjson.dumps(value)
            except TypeError as exc:
                self._dead(f"output of {node.op.name} cannot be sent to the hub as JSON: {exc}", node.op.name, raw)
            else:
                self.out.to_hub.append(HubRecord(node.op.name, node.group, t, key, value, encoded))
        for child in node.children:
            self._push(child, value, t, key, raw)

    def _push(self, node: Node, value: Any, t: float, key: str | None, raw: bytes | str) -> None:
        node.n_in += 1
        op = node.op
        kind = op.kind
        if kind is Kind.FILTER or kind is Kind.MAP:
            func = op.func
            assert func is not None
            try:
                result = func(value)
            except Exception as exc:
                self._dead(f"{op.name} ({op.location}) raised {type(exc).__name__}: {exc}", op.name, raw)
                return
            if kind is Kind.MAP:
                node.n_out += 1
                self._emit(node, result, t, key, raw)
            elif result:
                node.n_out += 1
                self._emit(node, value, t, key, raw)
        elif kind is Kind.FLAT_MAP:
            try:
                results = list(op.apply(value))
            except Exception as exc:
                self._dead(f"{op.name} ({op.location}) raised {type(exc).__name__}: {exc}", op.name, raw)
                return
            for result in results:
                node.n_out += 1
                self._emit(node, result, t, key, raw)
        elif node.window is not None:
            try:
                accepted = node.window.add(value, t, self.watermark)
            except FieldError as exc:
                self._dead(f"window {op.name}: {exc}", op.name, raw)
                return
            except Exception as exc:  # a custom aggregation's add() failed on this record
                self._dead(f"window {op.name}: aggregation raised {type(exc).__name__}: {exc}", op.name, raw)
                return
            if not accepted:
                self.late_count += 1
                self.out.late.append(
                    DeadLetter(
                        f"late: event time {t} is behind the watermark {self.watermark} "
                        f"(allowed lateness {node.window.lateness}s)",
                        op.name,
                        _text(raw),
                        self.site,
                        self.clock(),
                    )
                )
        elif op.kind is Kind.SINK:
            assert op.sink is not None
            node.n_out += 1
            self.out.sinks.append(SinkItem(op.name, op.sink, value))
        else:  # union, or a source feeding children
            node.n_out += 1
            self._emit(node, value, t, key, raw)

    def _advance(self) -> None:
        # sources that have sent nothing yet do not hold the watermark back
        seen = self.max_event_time
        watermark = (min(seen.values()) if len(seen) > 1 else next(iter(seen.values()))) - self.out_of_orderness
        if watermark > self.watermark:
            self.watermark = watermark
            self._fire(watermark)

    def tick(self) -> bool:
        """Advance the watermark with the agent clock if no record arrived for ``idle_timeout`` seconds.

        Once ``clock()`` is ``idle_timeout`` seconds past the arrival of the last
        record with a usable event time (dead letters do not count), the watermark
        moves to ``clock() - idle_timeout - out_of_orderness``, never backwards,
        and the windows it passes (end plus allowed lateness) fire as on any
        advance: their results are in the next :meth:`take`. A record that
        arrives later for a window that already fired is late, like any other.
        A pipeline that has never seen a record keeps its watermark at ``-inf``
        (it has no window to fire); one restored from a checkpoint counts the
        idle time from when it was built. A no-op without ``idle_timeout``;
        the agent calls it every second or more often.

        Returns:
            True if the watermark moved.
        """
        timeout = self.idle_timeout
        if timeout is None or self.watermark == -math.inf:
            return False
        now = self.clock()
        if now - self.last_record < timeout:
            return False
        watermark = now - timeout - self.out_of_orderness
        if watermark <= self.watermark:
            return False
        self.watermark = watermark
        self._fire(watermark)
        return True

    def _fire(self, watermark: float) -> None:
        for node in self.windows:
            assert node.window is not None
            for key, start, end, results in node.window.advance(watermark):
                if not results:  # the aggregation failed; reported below
                    continue
                value = {node.window.spec.key: key, "window_start": start, "window_end": end, **results}
                node.n_out += 1
                self._emit(node, value, end - 0.001, str(key), orjson.dumps(value, default=str))
            while node.window.errors:
                self._dead(node.window.errors.pop(0), node.op.name, "")

    def flush(self) -> None:
        """Fire every open window, as if event time had ended."""
        self.watermark = math.inf
        self._fire(math.inf)

    def _dead(self, reason: str, operator: str, payload: bytes | str) -> None:
        self.dlq_count += 1
        self.out.dlq.append(DeadLetter(reason, operator, _text(payload), self.site, self.clock()))

    # -- results and state -------------------------------------------------

    def take(self) -> Outputs:
        """Return and clear what was produced since the last call."""
        out, self.out = self.out, Outputs()
        return out

    def watermark_lag(self) -> float | None:
        """Seconds between the agent clock and the watermark (``None`` before any event)."""
        if not math.isfinite(self.watermark):
            return None
        return max(0.0, self.clock() - self.watermark)

    def snapshot(self) -> dict[str, Any]:
        """Window state and event-time progress as JSON-ready data."""
        return {
            "v": SNAPSHOT_VERSION,
            "max_event_time": dict(self.max_event_time),
            "watermark": self.watermark if math.isfinite(self.watermark) else None,
            "windows": {
                n.replica: {"spec": n.window.fingerprint, "state": n.window.snapshot()}
                for n in self.windows
                if n.window is not None
            },
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Restore a :meth:`snapshot`.

        Replicas this pipeline does not run are ignored, and so is the state of
        a window whose definition changed since the snapshot (it starts empty).
        """
        if data.get("v") != SNAPSHOT_VERSION:
            return
        self.max_event_time = {k: float(v) for k, v in data.get("max_event_time", {}).items() if k in self.sources}
        wm = data.get("watermark")
        self.watermark = -math.inf if wm is None else float(wm)
        for node in self.windows:
            saved = data.get("windows", {}).get(node.replica)
            if saved is None or node.window is None:
                continue
            if saved.get("spec") != node.window.fingerprint:
                log.warning("window %s changed since the checkpoint; its open windows start empty", node.replica)
                continue
            node.window.restore(saved["state"])

    def metrics(self) -> dict[str, dict[str, int]]:
        """Records in and out per replica."""
        return {n.replica: {"in": n.n_in, "out": n.n_out} for n in self.nodes}


def _text(payload: bytes | str) -> str:
    return payload if isinstance(payload, str) else payload.decode("utf-8", "replace")


def _make_node(app: App, replica: str, group: str) -> Node:
    op = app.operators[split_replica(replica)[0]]
    return Node(replica, op, group, window=WindowState(op.window) if op.window is not None else None)


def from_plan(app: App, plan: Plan, site: str, **options: Any) -> Pipeline:
    """Build the pipeline of ``site`` from ``plan``.

    Source replicas feeding a replica here, or running here with a consumer at
    the hub, become source nodes; flows to the hub mark their source node
    ``to_hub``.
    """
    placed = {a.replica: a for a in plan.assignments}
    local = [a.replica for a in plan.at(site)]
    local_set = set(local)
    nodes: dict[str, Node] = {}

    def group_of(replica: str) -> str:
        a = placed.get(replica)
        return (a.group if a is not None else split_replica(replica)[1]) or site

    def needed_source(flow_src: str) -> bool:
        op = app.operators.get(split_replica(flow_src)[0])
        return op is not None and op.kind is Kind.SOURCE

    order: list[str] = []
    for replica in local:
        for flow in plan.inputs(replica):
            if flow.src not in local_set and needed_source(flow.src) and flow.src not in order:
                order.append(flow.src)
    for replica in local:
        if replica not in order:
            order.append(replica)
    for replica in order:
        nodes[replica] = _make_node(app, replica, group_of(replica))
    for replica in order:
        node = nodes[replica]
        for flow in plan.outputs(replica):
            if flow.dst in nodes:
                node.children.append(nodes[flow.dst])
            elif placed.get(flow.dst) is not None and placed[flow.dst].site == plan.hub:
                node.to_hub = True
    # a source here with nothing to feed (its consumers were offloaded elsewhere) is not subscribed
    kept = [n for n in nodes.values() if n.op.kind is not Kind.SOURCE or n.children or n.to_hub]
    return Pipeline(app, site, kept, **options)


def edge_part(app: App, site: str, **options: Any) -> Pipeline:
    """Build the pipeline an edge site runs when every operator that can run there does.

    Operators that are not hub-only and read only from such operators run
    here; their outputs read by the rest cross to the hub.
    """
    ops = app.operators
    graph = app.graph()

    edge: dict[str, Node] = {}
    for name in nx.topological_sort(graph):
        op = ops[name]
        if op.hub_only or any(u not in edge for u in op.inputs):
            continue
        replica = f"{name}@{site}"
        edge[name] = Node(replica, op, site, window=WindowState(op.window) if op.window is not None else None)
    for name, node in edge.items():
        for succ in graph.successors(name):
            if succ in edge:
                node.children.append(edge[succ])
            else:
                node.to_hub = True
    return Pipeline(app, site, list(edge.values()), **options)
