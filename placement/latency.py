"""The latency, bandwidth and cost of every directed pair of sites.

Values come, in order of preference, from measured rows (a long table with
one row per directed site pair, as agents report them), from the links
declared in ``sites.yaml``, from the shortest path over those known links
(networkx Dijkstra over the site graph, :mod:`placement.graph`), and finally
from the file's ``default_link``.

Measured rows are mappings (or CSV/JSON files) with the columns ``src``,
``dst``, ``latency_p50_ms`` and, optionally, ``latency_p95_ms``,
``bandwidth_mbps``, ``cost`` and ``measured_at``.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from placement.graph import fastest_paths, site_graph
from spanedge.errors import InvalidSites
from spanedge.files import read_text
from spanedge.sites import Sites

if TYPE_CHECKING:
    import networkx as nx

COLUMNS = ("src", "dst", "latency_p50_ms", "latency_p95_ms", "bandwidth_mbps", "cost", "measured_at")


@dataclass(frozen=True)
class LinkInfo:
    """What is known about one directed pair of sites.

    ``origin`` says where the numbers come from: ``measured``, ``declared``,
    ``path`` (shortest path over known links) or ``default``.
    """

    latency_ms: float
    bandwidth_mbps: float
    cost: float = 1.0
    latency_p95_ms: float | None = None
    measured_at: str | None = None
    origin: str = "declared"


class LatencyMatrix:
    """Latency (ms), bandwidth (Mbit/s) and relative cost per byte between sites.

    >>> m = LatencyMatrix(["a", "b", "c"], {("a", "b"): LinkInfo(10, 100), ("b", "c"): LinkInfo(5, 50)})
    >>> m.latency("a", "c"), m.bandwidth("a", "c"), m.latency("a", "a")
    (15.0, 50.0, 0.0)
    """

    def __init__(
        self,
        sites: Iterable[str],
        direct: Mapping[tuple[str, str], LinkInfo],
        default: LinkInfo | None = None,
    ) -> None:
        """Take the direct entries; the other pairs get the shortest path over them, else ``default``."""
        self.sites: tuple[str, ...] = tuple(dict.fromkeys(list(sites) + [s for pair in direct for s in pair]))
        self._direct = dict(direct)
        self._default = default
        self._known = frozenset(self.sites)
        self._paths: dict[str, dict[str, tuple[float, float, float]]] = {}

    @cached_property
    def _graph(self) -> nx.DiGraph[str]:
        """The site graph of the direct entries (:func:`placement.graph.site_graph`)."""
        return site_graph(self.sites, self._direct)

    def _filled(self, a: str, b: str) -> tuple[float, float, float]:
        """Latency, bandwidth and cost of ``a -> b`` by the fastest path over the direct entries, else the default.

        Of paths equally fast, the cheaper one wins. The paths from a site are
        found on the first question about one of its pairs without a direct
        entry, so a matrix only built to derive another
        (``with_measurements``), or only asked about direct pairs, costs nothing.
        """
        self._check(a, b)
        found = self._paths_from(a).get(b)
        if found is not None:
            return found
        if self._default is not None:
            return self._default.latency_ms, self._default.bandwidth_mbps, self._default.cost
        return math.inf, 0.0, math.inf

    def _paths_from(self, a: str) -> dict[str, tuple[float, float, float]]:
        """The fastest paths from ``a`` (:func:`placement.graph.fastest_paths`), found once."""
        paths = self._paths.get(a)
        if paths is None:
            paths = self._paths[a] = fastest_paths(self._graph, a)
        return paths

    @classmethod
    def from_sites(cls, sites: Sites) -> LatencyMatrix:
        """The matrix declared by ``sites.yaml``: its links (both directions) and default link."""
        direct: dict[tuple[str, str], LinkInfo] = {}
        for link in sites.links:
            a, b = link.between
            info = LinkInfo(link.latency_ms, link.bandwidth_mbps, link.cost, origin="declared")
            direct[a, b] = info
            direct[b, a] = info
        d = sites.default_link
        return cls(sites.sites, direct, LinkInfo(d.latency_ms, d.bandwidth_mbps, d.cost, origin="default"))

    def with_measurements(
        self, rows: Iterable[Mapping[str, Any]] | str | Path, where: str = "measurements"
    ) -> LatencyMatrix:
        """Return a copy where measured rows override what was declared for their pairs.

        ``rows`` are mappings, or the path of a CSV or JSON file of them. Blank
        optional fields keep the declared value of the pair. Sites the matrix
        does not know are an error when the matrix came from sites.
        """
        if isinstance(rows, (str, Path)):
            where = str(rows)
            rows = read_rows(rows)
        direct = dict(self._direct)
        for i, row in enumerate(rows, start=1):
            src, dst, m = _parse_row(row, f"{where} row {i}")
            for end in (src, dst):
                if self._known and end not in self._known:
                    msg = f"{where} row {i}: unknown site {end!r}; known sites: {', '.join(self.sites)}"
                    raise InvalidSites(msg)
            # a blank bandwidth or cost keeps the pair's known value, else the usual default
            known = direct.get((src, dst)) or self._default
            bandwidth, cost = m.bandwidth_mbps, m.cost
            if known is not None:
                bandwidth = known.bandwidth_mbps if math.isnan(bandwidth) else bandwidth
                cost = known.cost if math.isnan(cost) else cost
            direct[src, dst] = LinkInfo(
                latency_ms=m.latency_ms,
                bandwidth_mbps=100.0 if math.isnan(bandwidth) else bandwidth,
                cost=1.0 if math.isnan(cost) else cost,
                latency_p95_ms=m.latency_p95_ms,
                measured_at=m.measured_at,
                origin="measured",
            )
        return LatencyMatrix(self.sites, direct, self._default)

    @classmethod
    def load(cls, path: str | Path, sites: Sites | None = None) -> LatencyMatrix:
        """Read measured rows from a CSV or JSON file, over ``sites`` if given."""
        base = cls.from_sites(sites) if sites is not None else cls((), {})
        return base.with_measurements(Path(path))

    def info(self, a: str, b: str) -> LinkInfo:
        """Everything known about the pair ``a -> b``."""
        if a == b:
            return LinkInfo(0.0, math.inf, 0.0, origin="same site")
        direct = self._direct.get((a, b))
        if direct is not None:
            return direct
        self._check(a, b)
        if b in self._paths_from(a):
            return LinkInfo(*self._filled(a, b), origin="path")
        if self._default is not None:
            return replace(self._default, origin="default")
        return LinkInfo(math.inf, 0.0, math.inf, origin="unreachable")

    def _check(self, a: str, b: str) -> None:
        if a not in self._known or b not in self._known:
            msg = f"no latency known between {a!r} and {b!r}; known sites: {', '.join(self.sites)}"
            raise InvalidSites(msg)

    def latency(self, a: str, b: str) -> float:
        """Latency from ``a`` to ``b`` in ms (0 for the same site)."""
        if a == b:
            return 0.0
        direct = self._direct.get((a, b))
        if direct is not None:
            return direct.latency_ms
        return self._filled(a, b)[0]

    def latencies_from(self, a: str) -> dict[str, float]:
        """The latency in ms from ``a`` to every other site, by site name."""
        self._check(a, a)
        return {b: float(self.latency(a, b)) for b in self.sites if b != a}

    def bandwidth(self, a: str, b: str) -> float:
        """Bandwidth from ``a`` to ``b`` in Mbit/s (infinite for the same site)."""
        if a == b:
            return math.inf
        direct = self._direct.get((a, b))
        if direct is not None:
            return direct.bandwidth_mbps
        return self._filled(a, b)[1]

    def cost(self, a: str, b: str) -> float:
        """Relative cost per byte sent from ``a`` to ``b`` (0 for the same site)."""
        if a == b:
            return 0.0
        direct = self._direct.get((a, b))
        if direct is not None:
            return direct.cost
        return self._filled(a, b)[2]

    def rows(self) -> list[dict[str, Any]]:
        """The full matrix as a long table (one row per directed pair)."""
        out = []
        for a, b in sorted((a, b) for a in self.sites for b in self.sites if a != b):
            info = self.info(a, b)
            out.append(
                {
                    "src": a,
                    "dst": b,
                    "latency_p50_ms": info.latency_ms,
                    "latency_p95_ms": info.latency_p95_ms,
                    "bandwidth_mbps": info.bandwidth_mbps,
                    "cost": info.cost,
                    "measured_at": info.measured_at,
                    "origin": info.origin,
                }
            )
        return out


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Read a long table of measured links from CSV or JSON (a list of rows, or ``{"rows": [...]}``)."""
    path = Path(path)
    text = read_text(path, "latency file", InvalidSites)
    if path.suffix.lower() == ".json" or text.lstrip()[:1] in ("[", "{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            msg = f"{path}: not valid JSON ({exc}); expected a list of rows with {', '.join(COLUMNS[:3])}"
            raise InvalidSites(msg) from None
        if isinstance(data, dict):
            data = data.get("rows")
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            msg = f'{path}: expected a list of objects (or {{"rows": [...]}}) with {", ".join(COLUMNS[:3])}'
            raise InvalidSites(msg)
        return data
    reader = csv.DictReader(text.splitlines())
    missing = [c for c in COLUMNS[:3] if c not in (reader.fieldnames or ())]
    if missing:
        msg = f"{path}: CSV header lacks {', '.join(missing)}; expected columns {', '.join(COLUMNS)}"
        raise InvalidSites(msg)
    return list(reader)


def _number(row: Mapping[str, Any], key: str, where: str, required: bool = False) -> float:
    value = row.get(key)
    if type(value) is float and value >= 0:  # the usual case, and the checks below would pass (NaN fails >= 0)
        return value
    if value is None or (isinstance(value, str) and not value.strip()):
        if required:
            msg = f"{where}: missing {key}; every row needs {', '.join(COLUMNS[:3])}"
            raise InvalidSites(msg)
        return math.nan
    try:
        number = float(value)
    except (TypeError, ValueError):
        msg = f"{where}: {key} must be a number, got {value!r}"
        raise InvalidSites(msg) from None
    if number < 0 or math.isnan(number):
        msg = f"{where}: {key} must be >= 0, got {value!r}"
        raise InvalidSites(msg)
    return number


class _Row(NamedTuple):
    """A measured row's numbers; a blank bandwidth or cost is NaN."""

    latency_ms: float
    bandwidth_mbps: float
    cost: float
    latency_p95_ms: float | None
    measured_at: str | None


def _parse_row(row: Mapping[str, Any], where: str) -> tuple[str, str, _Row]:
    src, dst = row.get("src"), row.get("dst")
    if not src or not dst:
        msg = f"{where}: needs src and dst site names, got {dict(row)!r}"
        raise InvalidSites(msg)
    p50 = _number(row, "latency_p50_ms", where, required=True)
    p95 = _number(row, "latency_p95_ms", where)
    bandwidth = _number(row, "bandwidth_mbps", where)
    if bandwidth == 0:
        msg = f"{where}: bandwidth_mbps must be > 0, got 0"
        raise InvalidSites(msg)
    measured_at = row.get("measured_at")
    return (
        str(src),
        str(dst),
        _Row(
            latency_ms=p50,
            bandwidth_mbps=bandwidth,
            cost=_number(row, "cost", where),
            latency_p95_ms=None if math.isnan(p95) else p95,
            measured_at=str(measured_at) if measured_at not in (None, "") else None,
        ),
    )


def nearest(matrix: LatencyMatrix, origin: str, candidates: Sequence[str], within_ms: float = math.inf) -> list[str]:
    """``candidates`` at most ``within_ms`` from ``origin``, sorted by latency from it (ties by name)."""
    row = matrix.latencies_from(origin)
    near = ((row[c] if c in row else matrix.latency(origin, c), c) for c in candidates)
    return [c for _, c in sorted(x for x in near if x[0] <= within_ms)]
