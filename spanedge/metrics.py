"""Prometheus exposition shared by the hub and the agents, through ``prometheus_client``.

Numbers are read when a scrape arrives and collected as metric families next
to the process's own metrics (CPU, memory, open files). Names follow
Prometheus conventions: base units (``_seconds``, ``_bytes``, ``_ratio``) and
counters ending in ``_total``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from spanedge.numbers import number

CONTENT_TYPE = CONTENT_TYPE_LATEST

_NAME = re.compile(r"[^a-zA-Z0-9_]")


def metric_name(*parts: str) -> str:
    """Join ``parts`` into a valid metric name (other characters become ``_``)."""
    return _NAME.sub("_", "_".join(p for p in parts if p)).lower()


class Exposition(Collector):
    """Samples grouped by metric family, collected with the process metrics into the text format."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def add(
        self,
        name: str,
        value: object,
        labels: Mapping[str, object] | None = None,
        *,
        help: str = "",
        scale: float = 1.0,
    ) -> None:
        """Add one sample (times ``scale``, e.g. 1e-3 for milliseconds); a flag is 0 or 1, non-numbers are skipped.

        A name ending in ``_total`` is a counter, any other a gauge.
        """
        found = number(int(value) if isinstance(value, bool) else value)
        if found is None:
            return
        counter = name.endswith("_total")
        family_name = name.removesuffix("_total") if counter else name
        family = self._families.get(family_name)
        if family is None:
            family = Metric(family_name, help or name.replace("_", " "), "counter" if counter else "gauge")
            self._families[family_name] = family
        family.add_sample(name, {k: str(v) for k, v in (labels or {}).items()}, found * scale)

    def collect(self) -> Iterator[Metric]:
        """The families added so far."""
        yield from self._families.values()

    def render(self) -> str:
        """The exposition text: these families and the hub process's own metrics."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        ProcessCollector(registry=registry)
        return generate_latest(registry).decode()


def serve(port: int, collect: Callable[[], Exposition], host: str = "0.0.0.0") -> None:
    """Serve ``collect()``'s families and the process metrics on ``http://host:port/metrics`` (a daemon thread)."""
    from prometheus_client import start_http_server

    class _Live(Collector):
        def collect(self) -> Iterator[Metric]:
            yield from collect().collect()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Live())
    ProcessCollector(registry=registry)
    start_http_server(port, addr=host, registry=registry)
