"""One streaming query listener for the whole hub, reading each progress event from its JSON.

PySpark hands a Python listener every event through py4j: a progress
event becomes a few hundred calls back into the JVM (one per field, and
for every map it walks, an iterator that ends in a Java exception, which
PySpark classifies with a dozen more calls that each look a class up in
every jar). With two listeners and a few micro-batches a second that was
about a tenth of the hub's CPU on two cores. :class:`ProgressFanout` asks
the JVM once for the event's JSON (``StreamingQueryProgress.json``, what
Spark Connect sends its clients), builds the same
:class:`~pyspark.sql.streaming.listener.QueryProgressEvent` from it, and
hands it to each of the hub's listeners.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.listener import (
    JStreamingQueryListener,
    QueryProgressEvent,
    StreamingQueryListener,
)

from hub.engine.session import spark_ended

if TYPE_CHECKING:
    from py4j.java_gateway import JavaObject

log = logging.getLogger(__name__)


class ProgressFanout(StreamingQueryListener):
    """Hands every query event to ``listeners`` in turn; a listener that raises is logged, the others still run."""

    def __init__(self, listeners: Sequence[StreamingQueryListener]) -> None:
        """Fan events out to ``listeners``, in this order."""
        self.listeners = tuple(listeners)

    @property
    def _jlistener(self) -> JavaObject:
        """The JVM side of this listener: PySpark's wrapper around :class:`_JsonEvents` (built once)."""
        from pyspark import SparkContext

        made: JavaObject | None = getattr(self, "_jlistenerobj", None)
        if made is None:
            jvm = SparkContext._jvm
            assert jvm is not None, "a SparkContext must be running to add a listener"
            made = jvm.PythonStreamingQueryListenerWrapper(_JsonEvents(self))
            self._jlistenerobj = made
        return made

    def _each(self, method: str, event: Any) -> None:
        for listener in self.listeners:
            try:
                getattr(listener, method)(event)
            except Exception:
                log.exception("streaming listener %s failed in %s", type(listener).__name__, method)

    def onQueryStarted(self, event: Any) -> None:
        """Pass the start of a query on."""
        self._each("onQueryStarted", event)

    def onQueryProgress(self, event: Any) -> None:
        """Pass a micro-batch's progress on."""
        self._each("onQueryProgress", event)

    def onQueryIdle(self, event: Any) -> None:
        """Pass an idle query's event on."""
        self._each("onQueryIdle", event)

    def onQueryTerminated(self, event: Any) -> None:
        """Pass the end of a query on."""
        self._each("onQueryTerminated", event)


class _JsonEvents(JStreamingQueryListener):
    """The object the JVM calls: progress events are read from their JSON in one call.

    Reading an event calls back into the JVM. An event that arrives while
    Spark ends the session (the hub stopping, or its JVM told to stop) can no
    longer be read; that is logged at INFO and the event dropped, since py4j
    would log any error the callback raised as an ERROR with a traceback.
    """

    def onQueryStarted(self, jevent: JavaObject) -> None:
        self._read("onQueryStarted", lambda: super(_JsonEvents, self).onQueryStarted(jevent))

    def onQueryProgress(self, jevent: JavaObject) -> None:
        def progress() -> None:
            event = json.loads(jevent.progress().json())
            self.pylistener.onQueryProgress(QueryProgressEvent.fromJson({"progress": event}))

        self._read("onQueryProgress", progress)

    def onQueryIdle(self, jevent: JavaObject) -> None:
        self._read("onQueryIdle", lambda: super(_JsonEvents, self).onQueryIdle(jevent))

    def onQueryTerminated(self, jevent: JavaObject) -> None:
        self._read("onQueryTerminated", lambda: super(_JsonEvents, self).onQueryTerminated(jevent))

    @staticmethod
    def _read(method: str, deliver: Callable[[], None]) -> None:
        try:
            deliver()
        except Exception as exc:
            if not spark_ended(exc):
                raise
            log.info("streaming listener: Spark ended the session before %s could be read", method)
