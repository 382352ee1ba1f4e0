"""The pipeline: the operators one site runs for one app, with event time and state.

A :class:`Pipeline` is built from a plan (:func:`spanedge.runtime.from_plan`) or,
for tests, from the app alone (:func:`spanedge.runtime.edge_part`). Feed it raw sensor messages with
:meth:`Pipeline.process`; call :meth:`Pipeline.tick` now and then so that
an idle input still closes its windows (with ``idle_timeout``); collect what
it produced with :meth:`Pipeline.take`. It does no I/O, so the agent,
:mod:`spanedge.testing` and the simulator's reference share it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from spanedge.app import App
from spanedge.errors import InvalidSnapshot
from spanedge.numbers import is_number
from spanedge.operators import Kind, Operator, WindowKind
from spanedge.runtime.operators import WINDOW_TIME_OFFSET, apply, failure
from spanedge.runtime.outputs import DeadLetter, HubRecord, Outputs, SinkItem
from spanedge.runtime.snapshot import SNAPSHOT_VERSION, OperatorSnapshot
from spanedge.runtime.windows import FieldError, WindowState

log = logging.getLogger(__name__)
_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError

Push = Callable[[Any, float, "str | None", "bytes | str", float], None]
"""Runs one record into a node, or into a node's successors: ``(value, event time, key, raw input, origin)``.

``origin`` is the event time of the source record, or the start of the window that produced this one.
"""


def _nowhere(value: Any, t: float, key: str | None, raw: bytes | str, origin: float) -> None:
    """The outputs of a node with no successor here and nothing for the hub."""


@dataclass(eq=False)
class Node:
    """One replica running here, wired to its local successors."""

    replica: str
    op: Operator
    group: str
    children: list[Node] = field(default_factory=list)
    to_hub: bool = False
    window: WindowState | None = None
    epoch: int = 0
    owns: tuple[float, float] | None = None  # one side of a handover: the origin times it emits for
    switch_at: float | None = None  # an old owner running on past its switch (feeding the hub's windows): the switch
    hub_before: float = math.inf  # records go to the hub only with an origin before this (feeding a hub handover)
    shadow: bool = False  # runs here for a replica's part (key range): its dead letters are the replica's own site's
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
        # each node's record path, built once: the nodes and their wiring are fixed from here on
        self._pushes: dict[int, Push] = {}
        self._fanout: dict[int, tuple[Push, ...]] = {}
        for node in nodes:
            self._push_of(node)
        self._entries = {r: (node, self._emit_of(node), node.op.time_field) for r, node in self.sources.items()}
        self._window_states = [n.window for n in self.windows if n.window is not None]
        #: the window replicas whose results :meth:`take_fired` reports (see :meth:`watch`)
        self.watched: frozenset[str] = frozenset()
        self._fired: list[tuple[str, str, float, float]] = []
        # per window replica, the results (key, start, end) not to emit: another version already did
        self._suppressed: dict[str, set[tuple[str, float, float]]] = {}

    # -- intake -----------------------------------------------------------

    def process(self, source: str, payload: bytes | str, arrival: float | None = None) -> None:
        """Run one raw sensor message of source replica ``source`` through the pipeline."""
        node, emit, field = self._entries[source]
        node.n_in += 1
        try:
            value = _loads(payload)
        except _JSONDecodeError as exc:
            self._dead(f"not valid JSON: {exc}", node.op.name, payload, node.shadow)
            return
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
                    emit(value, t, None, payload, t)
                    seen = self.max_event_time
                    if t > seen.get(source, -math.inf):
                        seen[source] = t
                        if len(seen) > 1:
                            self._advance()
                        elif t - self.out_of_orderness > self.watermark:  # one source: the watermark follows it
                            self._advance_to(t - self.out_of_orderness)
                    return
        self.process_value(source, value, arrival, raw=payload)

    def refuse(self, source: str, size: int, limit: int, topic: str) -> None:
        """Dead-letter a message of source replica ``source`` unread: its ``size`` is over its stream's ``limit``."""
        node = self.sources[source]
        node.n_in += 1
        if node.shadow:
            return  # the site that runs the replica itself reports it
        self.dlq_count += 1
        self.out.dlq.append(DeadLetter.oversize(node.op.name, size, limit, topic, self.site, self.clock()))

    def reject(self, source: str, reason: str, payload: bytes, where: str) -> None:
        """Dead-letter a value a connector read for ``source`` that does not fit (``where``: its node or register)."""
        node = self.sources[source]
        node.n_in += 1
        if node.shadow:
            return  # the site that runs the replica itself reports it
        self.dlq_count += 1
        dead = DeadLetter.of(reason, node.op.name, payload, self.site, self.clock())
        self.out.dlq.append(dataclasses.replace(dead, topic=where))

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
                self._dead(
                    f"expected a JSON object with event-time field '{op.time_field}'", op.name, original, node.shadow
                )
                return
            stamp = value.get(op.time_field)
            if not is_number(stamp):
                what = "missing" if op.time_field not in value else f"not a number ({stamp!r})"
                self._dead(
                    f"event-time field '{op.time_field}' is {what}; it must hold seconds since the epoch",
                    op.name,
                    original,
                    node.shadow,
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
                    node.shadow,
                )
                return
        node.n_out += 1
        self.last_record = now
        self._entries[source][1](value, t, None, original, t)  # the source's outputs
        if t > self.max_event_time.get(source, -math.inf):
            self.max_event_time[source] = t
            self._advance()

    # -- pushing ----------------------------------------------------------

    def _emit(
        self, node: Node, value: Any, t: float, key: str | None, raw: bytes | str, origin: float, epoch: int = -1
    ) -> None:
        # epoch: the share's of a window whose keys are divided between sites (else the node's)
        if node.to_hub:
            self._to_hub(node, value, t, key, raw, origin, epoch)
        for push in self._fanout[id(node)]:
            push(value, t, key, raw, origin)

    def _to_hub(
        self, node: Node, value: Any, t: float, key: str | None, raw: bytes | str, origin: float, epoch: int = -1
    ) -> None:
        owns = node.owns
        if (owns is None or owns[0] <= origin < owns[1]) and origin < node.hub_before:
            try:
                # a right-sized copy: orjson leaves its output in a buffer of 4 KiB or more, and these
                # records wait for the next commit (up to a checkpoint interval of window results)
                encoded = bytes(memoryview(orjson.dumps(value)))
            except TypeError as exc:
                self._dead(f"output of {node.op.name} cannot be sent to the hub as JSON: {exc}", node.op.name, raw)
            else:
                epoch = node.epoch if epoch < 0 else epoch
                self.out.to_hub.append(HubRecord(node.op.name, node.group, t, key, value, encoded, epoch))

    def _emit_of(self, node: Node) -> Push:
        """What runs a record ``node`` outputs: to the hub if it sends there, then into each successor here."""
        fanout = self._fanout[id(node)] = tuple(self._push_of(child) for child in node.children)
        if node.to_hub:
            to_hub = self._to_hub

            def emit(value: Any, t: float, key: str | None, raw: bytes | str, origin: float) -> None:
                to_hub(node, value, t, key, raw, origin)
                for push in fanout:
                    push(value, t, key, raw, origin)

            return emit
        if len(fanout) == 1:
            return fanout[0]
        if not fanout:
            return _nowhere

        def fan(value: Any, t: float, key: str | None, raw: bytes | str, origin: float) -> None:
            for push in fanout:
                push(value, t, key, raw, origin)

        return fan

    def _push_of(self, node: Node) -> Push:
        """What runs one record into ``node`` (built once per node)."""
        push = self._pushes.get(id(node))
        if push is None:
            push = self._pushes[id(node)] = self._build_push(node, self._emit_of(node))
        return push

    def _build_push(self, node: Node, emit: Push) -> Push:
        op = node.op
        kind = op.kind
        dead = self._dead
        name, shadow = op.name, node.shadow
        if kind is Kind.FILTER or kind is Kind.MAP or kind is Kind.FLAT_MAP:
            func: Callable[[Any], Any] = op.func if op.func is not None else lambda v: apply(op, v)  # apply() raises

            if kind is Kind.MAP:

                def push(value: Any, t: float, key: str | None, raw: bytes | str, origin: float) -> None:
                    node.n_in += 1
                    try:
                        result = func(value)
                    except Exception as exc:
                        dead(failure(op, exc), name, raw, shadow, error=True)
                        return
                    node.n_out += 1
                    emit(result, t, key, raw, origin)

            elif kind is Kind.FILTER:

                def push(value: Any, t: float, key: str | None, raw: bytes | str, origin: float) -> None:
                    node.n_in += 1
                    try:
                        keep = True if func(value) else False  # noqa: SIM210 -- a truth test that raises is the user's
                    except Exception as exc:
                        dead(failure(op, exc), name, raw, shadow, error=True)
                        return
                    if keep:
                        node.n_out += 1
                        emit(value, t, key, raw, origin)

            else:

                def push(value: Any, t: float, key: str | None, raw: bytes | str, origin: float) -> None:
                    node.n_in += 1
                    try:
                        results = list(func(value))
                    except Exception as exc:
                        dead(failure(op, exc), name, raw, shadow, error=True)
                        return
                    for result in results:
                        node.n_out += 1
                        emit(result, t, key, raw, origin)

            return push
        if kind is Kind.PREDICT:

            def score(value: Any, t: float, key: str | None, raw: bytes | str, origin: float) -> None:
                node.n_in += 1
                try:
                    (result,) = apply(op, value, t)  # the model version that event time ``t`` selects
                except Exception as exc:
                    dead(failure(op, exc), name, raw, shadow, error=True)
                    return
                node.n_out += 1
                emit(result, t, key, raw, origin)

            return score
        window = node.window
        if window is not None:
            add, add_tumbling = window.add, window.add_tumbling

            def into_window(value: Any, t: float, key: str | None, raw: bytes | str, origin: float) -> None:
                node.n_in += 1
                try:
                    accepted = add_tumbling(value, t) if window.whole_tumbling else add(value, t, self.watermark)
                except FieldError as exc:
                    dead(f"window {name}: {exc}", name, raw, shadow)
                    return
                except Exception as exc:  # a custom aggregation's add() failed on this record
                    dead(
                        f"window {name}: aggregation raised {type(exc).__name__}: {exc}", name, raw, shadow, error=True
                    )
                    return
                if not accepted:
                    self._late(node, window, t, raw)

            return into_window
        if kind is Kind.SINK:
            sink = op.sink
            assert sink is not None

            def into_sink(value: Any, t: float, key: str | None, raw: bytes | str, origin: float) -> None:
                node.n_in += 1
                owns = node.owns
                if owns is None or owns[0] <= origin < owns[1]:
                    node.n_out += 1
                    self.out.sinks.append(SinkItem(name, sink, value, t))

            return into_sink

        def through(value: Any, t: float, key: str | None, raw: bytes | str, origin: float) -> None:
            # union, or a source feeding children
            node.n_in += 1
            node.n_out += 1
            emit(value, t, key, raw, origin)

        return through

    def _late(self, node: Node, window: WindowState, t: float, raw: bytes | str) -> None:
        self.late_count += 1
        self.out.late.append(
            DeadLetter.of(
                f"late: event time {t} is behind the watermark {self.watermark} (allowed lateness {window.lateness}s)",
                node.op.name,
                raw,
                self.site,
                self.clock(),
            )
        )

    def _advance(self) -> None:
        # sources that have sent nothing yet do not hold the watermark back
        seen = self.max_event_time
        watermark = (min(seen.values()) if len(seen) > 1 else next(iter(seen.values()))) - self.out_of_orderness
        self._advance_to(watermark)

    def _advance_to(self, watermark: float) -> None:
        if watermark > self.watermark:
            self.watermark = watermark
            for window in self._window_states:
                if window.next_end <= watermark - window.lateness:  # advance() would fire a window
                    self._fire(watermark)
                    return

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
        fired, watched, suppressed = self._fired, self.watched, self._suppressed
        for node in self.windows:
            window = node.window
            assert window is not None
            skip = suppressed.get(node.replica)
            for key, start, end, results in window.advance(watermark):
                if not results:  # the aggregation failed; reported below
                    continue
                if skip is not None or watched:
                    ident = (str(key), start, end)
                    if skip is not None and ident in skip:
                        skip.discard(ident)  # emitted once already, by the version before
                        continue
                    if node.replica in watched:
                        fired.append((node.replica, *ident))
                value = {window.spec.key: key, "window_start": start, "window_end": end, **results}
                node.n_out += 1
                raw = orjson.dumps(value, default=str)
                share_epoch = window.epoch_of(key, start)
                epoch = -1 if share_epoch is None else share_epoch
                self._emit(node, value, end - WINDOW_TIME_OFFSET, str(key), raw, start, epoch)
            while window.errors:
                self._dead(window.errors.pop(0), node.op.name, "", error=True)  # a custom aggregation raised

    def fire_due(self) -> None:
        """Fire the windows the watermark has already passed (state put in place after it moved)."""
        if self.watermark > -math.inf:
            self._fire(self.watermark)

    def watch(self, replicas: frozenset[str]) -> None:
        """Report the results of the window ``replicas`` from now on (see :meth:`take_fired`)."""
        self.watched = replicas

    def take_fired(self) -> list[tuple[str, str, float, float]]:
        """Return and clear ``(replica, key, start, end)`` of each watched window result emitted since the last call."""
        fired, self._fired = self._fired, []
        return fired

    def suppress(self, replica: str, results: set[tuple[str, float, float]]) -> None:
        """Never emit the results ``(key as text, start, end)`` of window ``replica``: they were emitted already."""
        self._suppressed.setdefault(replica, set()).update(results)

    def flush(self) -> None:
        """Fire every open window, as if event time had ended."""
        self.watermark = math.inf
        self._fire(math.inf)

    def _dead(
        self, reason: str, operator: str, payload: bytes | str, shadow: bool = False, *, error: bool = False
    ) -> None:
        """Dead-letter a record; ``error``: a user's function raised on it."""
        if shadow:
            return  # the site that runs the replica itself reports it
        self.dlq_count += 1
        # a bounded excerpt of the original, with its size and hash: a 2 MB input never makes a 2 MB dead letter
        self.out.dlq.append(DeadLetter.of(reason, operator, payload, self.site, self.clock(), error=error))

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

    def frontier(self) -> float | None:
        """The event time below which this pipeline sends the hub nothing more; ``None`` if unknown.

        Also ``None`` if it sends the hub nothing more at all. A record-level
        output keeps its input's event time, at or past the watermark unless
        the record came later than ``out_of_orderness`` allows (such a record
        can be late at the hub); a window's result is bounded by
        :meth:`~spanedge.runtime.windows.WindowState.earliest_result`, with
        the same exception. Only the replicas whose results still reach the
        hub count: not a window that feeds local sinks only, nor a part of a
        handover that has emitted all it owned. Unknown before the watermark.
        """
        wm = self.watermark
        if not math.isfinite(wm):
            return None
        return _lowest_result(_feeding_hub(self.nodes, wm), wm, lambda n: n.to_hub)

    def sink_frontier(self) -> float | None:
        """The event time below which this pipeline gives its local sinks nothing more; ``None`` if unknown.

        Also ``None`` if it has no sink here, or none that still gets values
        (a part of a handover that has emitted all it owned). The same bounds
        as :meth:`frontier`, over the replicas that feed a sink.
        """
        wm = self.watermark
        if not math.isfinite(wm):
            return None
        return _lowest_result(_feeding(self.nodes, wm, lambda n, _: _is_sink(n)), wm, _is_sink)

    def idle_for(self) -> float:
        """Seconds of agent clock since the last record with a usable event time (or since the pipeline was built)."""
        return max(0.0, self.clock() - self.last_record)

    def snapshot(self) -> dict[str, Any]:
        """Every replica's state and the event-time progress as JSON-ready data."""
        return {
            "v": SNAPSHOT_VERSION,
            "max_event_time": dict(self.max_event_time),
            "watermark": self.watermark if math.isfinite(self.watermark) else None,
            "windows": {n.replica: self.snapshot_operator(n.replica).to_data() for n in self.windows},
        }

    def restore(self, data: dict[str, Any]) -> None:
        """Restore a :meth:`snapshot`.

        Replicas this pipeline does not run are ignored, and so is the state of
        a window whose definition changed since the snapshot (it starts empty).
        """
        if data.get("v") != SNAPSHOT_VERSION:
            log.warning("checkpoint has snapshot version %r, not %d; starting empty", data.get("v"), SNAPSHOT_VERSION)
            return
        self.max_event_time = {k: float(v) for k, v in data.get("max_event_time", {}).items() if k in self.sources}
        wm = data.get("watermark")
        self.watermark = -math.inf if wm is None else float(wm)
        for replica, saved in data.get("windows", {}).items():
            try:
                self.restore_operator(OperatorSnapshot.from_data(saved, replica))
            except InvalidSnapshot as exc:
                log.warning("window %s: %s; its open windows start empty", replica, exc)

    def state_bytes(self) -> dict[str, int]:
        """The size of each window replica's state here, as its snapshot would serialise it (bytes of JSON)."""
        return {n.replica: len(orjson.dumps(self.snapshot_operator(n.replica).to_data())) for n in self.windows}

    def key_records(self) -> dict[str, dict[Any, int]]:
        """The records each window replica here took per key since the last call (replicas that took none left out)."""
        out = {}
        for n in self.windows:
            assert n.window is not None
            if taken := n.window.take_key_records():
                out[n.replica] = taken
        return out

    def snapshot_operator(self, replica: str) -> OperatorSnapshot:
        """The state of one stateful replica here.

        Raises:
            KeyError: if ``replica`` is not a window running here.
        """
        node = next((n for n in self.windows if n.replica == replica), None)
        if node is None or node.window is None:
            raise KeyError(replica)
        return OperatorSnapshot(replica, node.window.fingerprint, node.window.snapshot(), self.watermark)

    def restore_operator(self, snapshot: OperatorSnapshot) -> bool:
        """Put one replica's state in place; False if the replica does not run here or changed.

        Raises:
            InvalidSnapshot: if the state does not fit the window (a corrupt snapshot).
        """
        node = next((n for n in self.windows if n.replica == snapshot.replica), None)
        if node is None or node.window is None:
            return False
        if snapshot.spec != node.window.fingerprint:
            log.warning("window %s changed since its snapshot; its open windows start empty", snapshot.replica)
            return False
        try:
            node.window.restore(snapshot.state)
        except (TypeError, ValueError, KeyError) as exc:
            msg = f"state of window {snapshot.replica} does not fit it: {exc}"
            raise InvalidSnapshot(msg) from None
        return True

    def drained(self) -> list[str]:
        """Replicas this site hands over, once its part is done: the watermark passed their last window.

        The old owner of a handover runs the replicas it hands over (a chain:
        record-level ones feed its windows) until then, and drops them together
        (see :class:`spanedge.plan.Handover`). Empty while any is still needed.
        """
        leaving = {n.replica: _leaves(n) for n in self.nodes}
        ends = {replica: end for replica, end in leaving.items() if end is not None}
        if not ends:
            return []
        return list(ends) if self.watermark >= max(ends.values()) else []

    def delivered(self) -> list[str]:
        """Replicas this site hands over whose part has emitted all it ever will, possibly before :meth:`drained`.

        The watermark has passed the end of the last window the part owns
        (plus the allowed lateness), or the switch for a record-level replica;
        the part is dropped later, with the margin :meth:`drained` keeps. An
        old owner that runs on past the switch for the hub's windows
        (:func:`~spanedge.runtime.build.spoke_feeds`) has delivered its part
        once it has emitted everything before the switch. Empty while any is
        still owed.
        """
        ends = {n.replica: end for n in self.nodes if (end := _delivered_at(n, n.switch_at)) is not None}
        if not ends:
            return []
        return list(ends) if self.watermark >= max(ends.values()) else []

    def metrics(self) -> dict[str, dict[str, int]]:
        """Records in and out per replica."""
        return {n.replica: {"in": n.n_in, "out": n.n_out} for n in self.nodes}


def _feeding_hub(nodes: list[Node], watermark: float) -> list[Node]:
    """The nodes (in topological order) whose records may still reach the hub, at ``watermark``."""
    return _feeding(nodes, watermark, lambda n, wm: n.to_hub and not _sent_hub_all(n, wm))


def _feeding(nodes: list[Node], watermark: float, sends: Callable[[Node, float], bool]) -> list[Node]:
    """The nodes (in topological order) that ``sends`` an output themselves or feed one that does, at ``watermark``."""
    feeding: set[int] = set()
    for node in reversed(nodes):
        if _emitted_all(node, watermark):
            continue
        if sends(node, watermark) or any(id(child) in feeding for child in node.children):
            feeding.add(id(node))
    return [n for n in nodes if id(n) in feeding]


def _is_sink(node: Node) -> bool:
    return node.op.kind is Kind.SINK


def _lowest_result(feeding: list[Node], watermark: float, record_level: Callable[[Node], bool]) -> float | None:
    """The lowest event time a result of ``feeding`` can still carry: the watermark, or a window's earliest result.

    ``record_level`` tells the nodes that output records as they come (their
    event time is at or past the watermark); None if ``feeding`` is empty.
    """
    if not feeding:
        return None
    bounds = [watermark] if any(record_level(n) and n.window is None for n in feeding) else []
    bounds += [n.window.earliest_result(watermark) for n in feeding if n.window is not None]
    return min(bounds)


def _emitted_all(node: Node, watermark: float) -> bool:
    """Whether ``node`` is a part of a handover here that has emitted all it owned."""
    done = _delivered_at(node)
    return done is not None and watermark >= done


def _sent_hub_all(node: Node, watermark: float) -> bool:
    """Whether ``node`` feeds a handover to the hub and has sent it every record it owes."""
    before = node.hub_before
    if before == math.inf:
        return False
    window = node.window
    if window is None:
        return watermark >= before
    if window.spec.kind is WindowKind.SESSION:
        return watermark >= window.session_part_done_at(before)
    return watermark >= window.last_end_before(before) + window.lateness


def _switch_of(node: Node) -> float | None:
    """The switch time of ``node``'s part of a handover at this site; ``None`` if the node stays."""
    window = node.window
    if window is not None and window.shares is not None:
        if not all(s.ends for s in window.shares):
            return None
        return max(s.start_before for s in window.shares)
    if node.owns is not None and node.owns[1] < math.inf:
        return node.owns[1]
    return None


def _leaves(node: Node) -> float | None:
    """Where the watermark must be for ``node``'s part of a handover to be done; ``None`` if it stays.

    A session window's part lasts until the sessions it owns have fired
    (:meth:`WindowState.session_part_done_at`).
    """
    switch = _switch_of(node)
    window = node.window
    if switch is None or window is None:
        return switch
    if window.spec.kind is WindowKind.SESSION:
        return window.session_part_done_at(switch)
    return switch + window.horizon()


def _delivered_at(node: Node, switch: float | None = None) -> float | None:
    """Where the watermark must be for ``node``'s part of a handover to have emitted everything; ``None`` if it stays.

    With ``switch``, its part up to that time (an old owner running on past its switch for the hub).
    """
    switch = _switch_of(node) if switch is None else switch
    window = node.window
    if switch is None or window is None:
        return switch
    if window.spec.kind is WindowKind.SESSION:
        return window.session_part_done_at(switch)
    return window.last_end_before(switch) + window.lateness
