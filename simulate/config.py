"""The ``simulation:`` section of ``sites.yaml``: sensors per spoke and WAN links.

Example::

    simulation:
      seed: 7
      settle: 10s
      wan: {jitter_ms: 5}
      links:
        - {between: [truck-7, cloud], delay_ms: 80, jitter_ms: 10, bandwidth_mbps: 2}
      sensors:
        truck-7:
          readings:
            count: 20
            rate: [1, 5]
            key: "t7-u{i:02d}"
            value:
              unit: $key
              ts: $event_time
              temp_f: {walk: {start: [34, 50], step: 0.3, min: 20, max: 70}}
              door_open: {bernoulli: 0.02}
            disorder: 1s
            malformed: 0.01

Links not listed take the one-way delay from ``latency_ms`` and the cap from
``bandwidth_mbps`` of the matching ``links:`` entry (or ``default_link:``) of
``sites.yaml``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import msgspec
import yaml

from spanedge.durations import parse_duration
from spanedge.errors import InvalidSites
from spanedge.file_models import FileModel, Place, convert, render, yaml_lines
from spanedge.files import read_text
from spanedge.numbers import is_number
from spanedge.sites import Sites

SPECIALS = ("$key", "$event_time", "$seq", "$site")
_OPTIONS = ("const", "uniform", "normal", "walk", "bernoulli", "choice", "format")

NonNegative = Annotated[float, msgspec.Meta(ge=0)]
Fraction = Annotated[float, msgspec.Meta(ge=0, le=1)]
QoS = Annotated[int, msgspec.Meta(ge=0, le=1)]


class Seconds(float):
    """A duration in seconds, zero or more: a number, or text with a unit such as ``10s``, ``500ms`` or ``5m``."""


class SignedSeconds(float):
    """A duration in seconds that may be negative, such as ``-1s``."""


def _seconds(value: Any, allow_zero: bool = True) -> float:
    if value in (0, 0.0, "0", "0s") and allow_zero:
        return 0.0
    return parse_duration(value)


def _decode(kind: type, value: Any) -> Any:
    """Build the duration types of the section (``msgspec.convert``'s ``dec_hook``)."""
    if kind is Seconds:
        return Seconds(_seconds(value))
    if kind is SignedSeconds:
        if isinstance(value, str) and value.startswith("-"):
            return SignedSeconds(-_seconds(value[1:]))
        if is_number(value):
            return SignedSeconds(value)
        return SignedSeconds(_seconds(value))
    raise NotImplementedError


def _as_floats(model: FileModel, *names: str) -> None:
    """Store the durations ``names`` of ``model`` as plain floats (what every other part of the code expects)."""
    for name in names:
        msgspec.structs.force_setattr(model, name, float(getattr(model, name)))


class Walk(FileModel, frozen=True):
    """A bounded random walk: the start (or a range to draw it from), the step and the bounds."""

    start: float | tuple[float, float]
    step: NonNegative
    min: float | None = None
    max: float | None = None


class FieldSpec(FileModel, frozen=True):
    """How one field of a generated value is made; exactly one option is set.

    Attributes:
        format: text with {key}, {site}, {stream}, {device} and {seq}.
    """

    const: Any = None
    uniform: tuple[float, float] | None = None
    normal: tuple[float, float] | None = None
    walk: Walk | None = None
    bernoulli: Fraction | None = None
    choice: list[Any] | None = None
    format: str | None = None
    round: Annotated[int, msgspec.Meta(ge=0)] | None = None

    def __post_init__(self) -> None:
        """Check that exactly one option is set, and that a choice has options."""
        chosen = [k for k in _OPTIONS if getattr(self, k) is not None]
        if len(chosen) != 1:
            msg = (
                f"a value field needs exactly one of {', '.join(_OPTIONS)} "
                f"(or one of {', '.join(SPECIALS)}), got {chosen or 'none'}"
            )
            raise ValueError(msg)
        if self.choice is not None and not self.choice:
            msg = "choice: choice needs at least one option"
            raise ValueError(msg)


def _default_value() -> dict[str, FieldSpec | str | bool | int | float]:
    return {"key": "$key", "ts": "$event_time"}


class SensorSpec(FileModel, frozen=True):
    """The sensors of one stream at one spoke.

    Attributes:
        count: number of devices.
        rate: messages/s per device, or [min, max] drawn per device.
        keys: distinct keys (default: one per device).
        key: key template; {site}, {stream} and {i} are filled.
        value: how each field of a message is made: a special ($key, ...), a constant or a generator.
        disorder: event times lag the send time by up to this many seconds.
        clock_skew: seconds added to every event time of this stream.
        malformed: fraction of malformed messages.
        qos: MQTT QoS (default: the stream binding's).
        device: ``opcua``: the sensors are the nodes of a simulated OPC UA server (one per key) that the
            site's ``opcua://`` stream subscribes to; ``modbus``: the points (with a ``time:``) of a
            simulated Modbus device that the site's ``modbus://`` stream polls. ``value`` then makes one
            number (besides specials).
    """

    count: Annotated[int, msgspec.Meta(ge=1)]
    rate: float | tuple[float, float]
    keys: Annotated[int, msgspec.Meta(ge=1)] | None = None
    key: str = "{site}-{i:03d}"
    value: dict[str, FieldSpec | str | bool | int | float] = msgspec.field(default_factory=_default_value)
    disorder: SignedSeconds = SignedSeconds(0.0)
    clock_skew: SignedSeconds = SignedSeconds(0.0)
    malformed: Fraction = 0.0
    qos: QoS | None = None
    device: Annotated[str, msgspec.Meta(pattern="^(opcua|modbus)$")] | None = None

    def __post_init__(self) -> None:
        """Check the rate, the specials of the value and a device's one value; store the durations as floats."""
        low, high = self.rate if isinstance(self.rate, tuple) else (self.rate, self.rate)
        if low <= 0 or high < low:
            msg = "rate: rate must be positive, and [min, max] with min <= max"
            raise ValueError(msg)
        for name, spec in self.value.items():
            if isinstance(spec, str) and spec.startswith("$") and spec not in SPECIALS:
                msg = f"value: field {name!r}: unknown {spec!r}; use one of {', '.join(SPECIALS)} or {{const: ...}}"
                raise ValueError(msg)
        if self.device is not None and (self.malformed or len(self.measured()) != 1):
            holder = "an opcua sensor's node" if self.device == "opcua" else "a modbus sensor's point"
            msg = (
                f"device: {holder} holds one number: give value: one field besides "
                "$key/$event_time/$seq/$site (e.g. value: {moisture: {normal: [30, 8], round: 1}}) and no malformed:"
            )
            raise ValueError(msg)
        _as_floats(self, "disorder", "clock_skew")

    def measured(self) -> list[str]:
        """The value fields that are not specials: for a device sensor, the one its node holds."""
        return [k for k, v in self.value.items() if not (isinstance(v, str) and v in SPECIALS)]

    @property
    def key_count(self) -> int:
        """Distinct keys the devices use."""
        return self.keys or self.count

    def device_key(self, site: str, stream: str, index: int) -> str:
        """The key of device ``index``."""
        return self.key.format(site=site, stream=stream, i=index % self.key_count)

    def time_field(self) -> str | None:
        """The value field that holds the event time, if any."""
        return next((k for k, v in self.value.items() if v == "$event_time"), None)


class LinkSpec(FileModel, frozen=True):
    """A WAN link to emulate between two sites (both directions).

    Attributes:
        delay_ms: one-way delay.
    """

    between: tuple[str, str]
    delay_ms: NonNegative | None = None
    jitter_ms: NonNegative | None = None
    bandwidth_mbps: Annotated[float, msgspec.Meta(gt=0)] | None = None


class WanDefaults(FileModel, frozen=True):
    """Defaults for every emulated link."""

    jitter_ms: NonNegative = 0.0


class Simulation(FileModel, frozen=True):
    """The whole ``simulation:`` section.

    Attributes:
        settle: windows ending this close to the end are not checked.
        warmup: results of the first seconds are left out of latencies.
    """

    seed: int = 1
    duration: Seconds = Seconds(60.0)
    settle: Seconds = Seconds(10.0)
    warmup: Seconds = Seconds(0.0)
    wan: WanDefaults = msgspec.field(default_factory=WanDefaults)
    links: list[LinkSpec] = msgspec.field(default_factory=list)
    sensors: dict[str, dict[str, SensorSpec]] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        """Store the durations as floats."""
        _as_floats(self, "duration", "settle", "warmup")


class Wan(FileModel, frozen=True):
    """The emulated parameters of one link, resolved from both sections."""

    a: str
    b: str
    delay_ms: float
    jitter_ms: float
    bandwidth_mbps: float | None


def parse_simulation(sites: Sites, where: str = "sites.yaml", lines: Mapping[Place, int] | None = None) -> Simulation:
    """Validate ``sites.simulation`` against the sites; errors name the file (``where``), line, field and fix.

    ``lines`` gives the line of every place in the file (:func:`sites_file_lines`), if known.
    """
    lines = lines or {}

    def at(*place: str | int) -> str:
        path = ("simulation", *place)
        line = next((lines[path[:i]] for i in range(len(path), 0, -1) if path[:i] in lines), None)
        return f"{where}:{line}: {render(path)}" if line is not None else f"{where}: {render(path)}"

    if not sites.simulation:
        msg = (
            f"{where} has no simulation: section; add one with sensors per spoke, e.g.\n"
            "simulation:\n  sensors:\n    <spoke>:\n      <stream>: {count: 10, rate: 2}"
        )
        raise InvalidSites(msg)
    sim = convert(
        sites.simulation,
        Simulation,
        where,
        title="simulation section",
        prefix=("simulation",),
        lines=lines,
        dec_hook=_decode,
    )
    for site, streams in sim.sensors.items():
        known = sites.sites.get(site)
        if known is None:
            msg = f"{at('sensors', site)}: unknown site {site!r}; known sites: {', '.join(sites.sites)}"
            raise InvalidSites(msg)
        for stream in streams:
            if stream not in known.streams:
                msg = (
                    f"{at('sensors', site, stream)}: site '{site}' does not source stream "
                    f"'{stream}' (it sources: {', '.join(known.streams) or 'nothing'}); add it under the site's streams:"
                )
                raise InvalidSites(msg)
    for i, link in enumerate(sim.links):
        for end in link.between:
            if end not in sites.sites:
                msg = f"{at('links', i)}: unknown site {end!r}; known sites: {', '.join(sites.sites)}"
                raise InvalidSites(msg)
    if not sim.sensors:
        msg = f"{at('sensors')} is empty; give each spoke the sensors of the streams it sources"
        raise InvalidSites(msg)
    return sim


def sites_file_lines(path: Path) -> dict[Place, int]:
    """The line of every place in the sites file at ``path``, which :func:`spanedge.sites.load_sites` read."""
    return yaml_lines(yaml.compose(read_text(path, "sites file", InvalidSites), Loader=yaml.SafeLoader))


def resolve_links(sites: Sites, sim: Simulation) -> list[Wan]:
    """The WAN parameters of every pair of sites (simulation overrides, then sites.yaml)."""
    names = list(sites.sites)
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            declared = next((lk for lk in sites.links if set(lk.between) == {a, b}), None)
            override = next((lk for lk in sim.links if set(lk.between) == {a, b}), None)
            delay = declared.latency_ms if declared else sites.default_link.latency_ms
            bandwidth: float | None = declared.bandwidth_mbps if declared else sites.default_link.bandwidth_mbps
            jitter = sim.wan.jitter_ms
            if override is not None:
                delay = override.delay_ms if override.delay_ms is not None else delay
                jitter = override.jitter_ms if override.jitter_ms is not None else jitter
                bandwidth = override.bandwidth_mbps if override.bandwidth_mbps is not None else bandwidth
            out.append(Wan(a=a, b=b, delay_ms=delay, jitter_ms=jitter, bandwidth_mbps=bandwidth))
    return out
