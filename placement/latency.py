"""The latency, bandwidth and cost of every directed pair of sites.

Values come, in order of preference, from measured rows (a long table with
one row per directed site pair, as agents report them), from the links
declared in ``sites.yaml``, from the shortest path over those known links,
and finally from the file's ``default_link``.

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
from typing import Any, NamedTuple

from spanedge.errors import InvalidSites, MissingExtra
from spanedge.files import read_text
from spanedge.sites import Sites

try:
    import numpy as np
except ModuleNotFoundError as exc:
    # The light core (`pip install spanedge`) has no numpy; say which extra brings it.
    raise MissingExtra(exc.name or "numpy", "placement") from None

#: Weight of a path's cost against its latency (ms) when ranking paths: only ties in latency see it.
_COST_TIE = 1e-12
#: Elements of the largest temporary array of the path search.
_CHUNK = 1 << 21

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


class _Filled(NamedTuple):
    """The full matrix, by site index: whether a path exists, and latency, bandwidth and cost."""

    reached: list[list[bool]]
    latency: list[list[float]]
    bandwidth: list[list[float]]
    cost: list[list[float]]


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
        """Build the full matrix from direct entries; fill the rest by shortest paths, then ``default``."""
        self.sites: tuple[str, ...] = tuple(dict.fromkeys(list(sites) + [s for pair in direct for s in pair]))
        self._direct = dict(direct)
        self._default = default
        self._index = {name: i for i, name in enumerate(self.sites)}

    @cached_property
    def _filled(self) -> _Filled:
        """Shortest paths (by latency) over the direct entries, by repeated min-plus squaring on arrays.

        A path's latency and cost are the sums over its hops and its bandwidth
        the narrowest hop; of paths equally fast, the cheaper one wins. Direct
        entries keep their own values. Each squaring doubles the hops a path
        may have, so a few large array operations do it, rather than one
        small one per site (which, in a busy multi-threaded hub, would wait
        for the interpreter lock at every step). Computed on the first
        question about a pair without a direct entry, so a matrix only built
        to derive another (``with_measurements``), or only asked about direct
        pairs, costs nothing.
        """
        n = len(self.sites)
        lat = np.full((n, n), np.inf)
        bw = np.zeros((n, n))
        cost = np.full((n, n), np.inf)
        np.fill_diagonal(lat, 0.0)
        np.fill_diagonal(bw, np.inf)
        np.fill_diagonal(cost, 0.0)
        pairs = [(self._index[a], self._index[b], info) for (a, b), info in self._direct.items() if a != b]
        if pairs:
            i, j, infos = zip(*pairs, strict=True)
            lat[i, j] = [x.latency_ms for x in infos]
            bw[i, j] = [x.bandwidth_mbps for x in infos]
            cost[i, j] = [x.cost for x in infos]
        key = lat + _COST_TIE * cost  # ranks equally fast paths by cost
        rows = max(1, min(n, _CHUNK // max(n * n, 1)))
        src, dst = np.arange(n)[:, None], np.arange(n)[None, :]
        through = np.empty((rows, n, n))  # [from, to, via], reused
        via = np.empty((n, n), dtype=np.intp)
        for _ in range(n.bit_length() + 1 if pairs else 0):
            into = np.ascontiguousarray(key.T)  # [to, via]
            for start in range(0, n, rows):
                part = through[: min(rows, n - start)]
                np.add(key[start : start + rows, None, :], into[None, :, :], out=part)
                via[start : start + rows] = part.argmin(axis=2)
            shorter = key[src, via] + key[via, dst]
            if not (shorter < key).any():
                break
            key = shorter
            lat, cost = lat[src, via] + lat[via, dst], cost[src, via] + cost[via, dst]
            bw = np.minimum(bw[src, via], bw[via, dst])
        unreached = ~np.isfinite(lat)
        if self._default is not None:
            lat[unreached] = self._default.latency_ms
            bw[unreached] = self._default.bandwidth_mbps
            cost[unreached] = self._default.cost
        else:
            bw[unreached] = 0.0
            cost[unreached] = np.inf
        if pairs:
            lat[i, j] = [x.latency_ms for x in infos]
            bw[i, j] = [x.bandwidth_mbps for x in infos]
            cost[i, j] = [x.cost for x in infos]
        return _Filled((~unreached).tolist(), lat.tolist(), bw.tolist(), cost.tolist())

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
            src, dst, info = _parse_row(row, f"{where} row {i}")
            for end in (src, dst):
                if self.sites and end not in self.sites:
                    msg = f"{where} row {i}: unknown site {end!r}; known sites: {', '.join(self.sites)}"
                    raise InvalidSites(msg)
            known = direct.get((src, dst)) or (self._default if self._default else None)
            if known is not None:
                info = LinkInfo(
                    latency_ms=info.latency_ms,
                    bandwidth_mbps=info.bandwidth_mbps if not math.isnan(info.bandwidth_mbps) else known.bandwidth_mbps,
                    cost=info.cost if not math.isnan(info.cost) else known.cost,
                    latency_p95_ms=info.latency_p95_ms,
                    measured_at=info.measured_at,
                    origin="measured",
                )
            direct[src, dst] = _finite(info)
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
        i, j = self._pair(a, b)
        filled = self._filled
        if filled.reached[i][j]:
            return LinkInfo(filled.latency[i][j], filled.bandwidth[i][j], filled.cost[i][j], origin="path")
        if self._default is not None:
            return replace(self._default, origin="default")
        return LinkInfo(math.inf, 0.0, math.inf, origin="unreachable")

    def _pair(self, a: str, b: str) -> tuple[int, int]:
        try:
            return self._index[a], self._index[b]
        except KeyError:
            msg = f"no latency known between {a!r} and {b!r}; known sites: {', '.join(self.sites)}"
            raise InvalidSites(msg) from None

    def latency(self, a: str, b: str) -> float:
        """Latency from ``a`` to ``b`` in ms (0 for the same site)."""
        if a == b:
            return 0.0
        direct = self._direct.get((a, b))
        if direct is not None:
            return direct.latency_ms
        i, j = self._pair(a, b)
        return self._filled.latency[i][j]

    def latencies_from(self, a: str) -> dict[str, float]:
        """The latency in ms from ``a`` to every other site, by site name."""
        i, _ = self._pair(a, a)
        return {b: ms for b, ms in zip(self.sites, self._filled.latency[i], strict=True) if b != a}

    def bandwidth(self, a: str, b: str) -> float:
        """Bandwidth from ``a`` to ``b`` in Mbit/s (infinite for the same site)."""
        if a == b:
            return math.inf
        direct = self._direct.get((a, b))
        if direct is not None:
            return direct.bandwidth_mbps
        i, j = self._pair(a, b)
        return self._filled.bandwidth[i][j]

    def cost(self, a: str, b: str) -> float:
        """Relative cost per byte sent from ``a`` to ``b`` (0 for the same site)."""
        if a == b:
            return 0.0
        direct = self._direct.get((a, b))
        if direct is not None:
            return direct.cost
        i, j = self._pair(a, b)
        return self._filled.cost[i][j]

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


def _parse_row(row: Mapping[str, Any], where: str) -> tuple[str, str, LinkInfo]:
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
    info = LinkInfo(
        latency_ms=p50,
        bandwidth_mbps=bandwidth,
        cost=_number(row, "cost", where),
        latency_p95_ms=None if math.isnan(p95) else p95,
        measured_at=str(measured_at) if measured_at not in (None, "") else None,
        origin="measured",
    )
    return str(src), str(dst), info


def _finite(info: LinkInfo) -> LinkInfo:
    """Give blank bandwidth and cost of a row without a declared pair the usual defaults."""
    return replace(
        info,
        bandwidth_mbps=100.0 if math.isnan(info.bandwidth_mbps) else info.bandwidth_mbps,
        cost=1.0 if math.isnan(info.cost) else info.cost,
    )


def nearest(matrix: LatencyMatrix, origin: str, candidates: Sequence[str], within_ms: float = math.inf) -> list[str]:
    """``candidates`` at most ``within_ms`` from ``origin``, sorted by latency from it (ties by name)."""
    row = matrix.latencies_from(origin)
    near = ((row[c] if c in row else matrix.latency(origin, c), c) for c in candidates)
    return [c for _, c in sorted(x for x in near if x[0] <= within_ms)]
