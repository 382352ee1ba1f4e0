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

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from spanedge.durations import parse_duration
from spanedge.errors import InvalidSites
from spanedge.sites import Sites

SPECIALS = ("$key", "$event_time", "$seq", "$site")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _seconds(value: Any, allow_zero: bool = True) -> float:
    if value in (0, 0.0, "0", "0s") and allow_zero:
        return 0.0
    return parse_duration(value)


class Walk(_Model):
    """A bounded random walk: the start (or a range to draw it from), the step and the bounds."""

    start: float | tuple[float, float]
    step: float = Field(ge=0)
    min: float | None = None
    max: float | None = None


class FieldSpec(_Model):
    """How one field of a generated value is made; exactly one option is set."""

    const: Any = None
    uniform: tuple[float, float] | None = None
    normal: tuple[float, float] | None = None
    walk: Walk | None = None
    bernoulli: float | None = Field(default=None, ge=0, le=1)
    choice: list[Any] | None = None
    format: str | None = Field(default=None, description="text with {key}, {site}, {stream}, {device} and {seq}")
    round: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one(self) -> FieldSpec:
        options = ("const", "uniform", "normal", "walk", "bernoulli", "choice", "format")
        chosen = [k for k in options if getattr(self, k) is not None]
        if len(chosen) != 1:
            msg = (
                "a value field needs exactly one of const, uniform, normal, walk, bernoulli, choice, format "
                f"(or one of {', '.join(SPECIALS)}), got {chosen or 'none'}"
            )
            raise ValueError(msg)
        if self.choice is not None and not self.choice:
            msg = "choice needs at least one option"
            raise ValueError(msg)
        return self


class SensorSpec(_Model):
    """The sensors of one stream at one spoke."""

    count: int = Field(ge=1, description="number of devices")
    rate: float | tuple[float, float] = Field(description="messages/s per device, or [min, max] drawn per device")
    keys: int | None = Field(default=None, ge=1, description="distinct keys (default: one per device)")
    key: str = Field(default="{site}-{i:03d}", description="key template; {site}, {stream} and {i} are filled")
    value: dict[str, FieldSpec | str | bool | int | float] = Field(
        default_factory=lambda: dict[str, FieldSpec | str | bool | int | float]({"key": "$key", "ts": "$event_time"})
    )
    disorder: float = Field(default=0.0, description="event times lag the send time by up to this many seconds")
    clock_skew: float = Field(default=0.0, description="seconds added to every event time of this stream")
    malformed: float = Field(default=0.0, ge=0, le=1, description="fraction of malformed messages")
    qos: int | None = Field(default=None, ge=0, le=1, description="MQTT QoS (default: the stream binding's)")

    @field_validator("disorder", "clock_skew", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        if isinstance(value, str) and value.startswith("-"):
            return -_seconds(value[1:])
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        return _seconds(value)

    @field_validator("rate")
    @classmethod
    def _rate(cls, value: float | tuple[float, float]) -> float | tuple[float, float]:
        low, high = value if isinstance(value, tuple) else (value, value)
        if low <= 0 or high < low:
            msg = f"rate must be positive, and [min, max] with min <= max, got {value!r}"
            raise ValueError(msg)
        return value

    @field_validator("value", mode="before")
    @classmethod
    def _fields(cls, value: Any) -> dict[str, FieldSpec | str | bool | int | float]:
        if not isinstance(value, dict):
            msg = f"value must map field names to how they are made, got {value!r}"
            raise ValueError(msg)
        out: dict[str, FieldSpec | str | bool | int | float] = {}
        for name, spec in value.items():
            if isinstance(spec, str) and spec.startswith("$") and spec not in SPECIALS:
                msg = f"field {name!r}: unknown {spec!r}; use one of {', '.join(SPECIALS)} or {{const: ...}}"
                raise ValueError(msg)
            if isinstance(spec, dict):
                try:
                    out[str(name)] = FieldSpec.model_validate(spec)
                except ValidationError as exc:
                    why = "; ".join(f"{'.'.join(map(str, e['loc'])) or name}: {e['msg']}" for e in exc.errors())
                    msg = f"field {name!r}: {why}"
                    raise ValueError(msg) from None
            elif isinstance(spec, str | bool | int | float):
                out[str(name)] = spec
            else:
                msg = f"field {name!r}: expected $key, $event_time, $seq, $site, a constant or {{uniform: ...}}, got {spec!r}"
                raise ValueError(msg)
        return out

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


class LinkSpec(_Model):
    """A WAN link to emulate between two sites (both directions)."""

    between: tuple[str, str]
    delay_ms: float | None = Field(default=None, ge=0, description="one-way delay")
    jitter_ms: float | None = Field(default=None, ge=0)
    bandwidth_mbps: float | None = Field(default=None, gt=0)


class WanDefaults(_Model):
    """Defaults for every emulated link."""

    jitter_ms: float = Field(default=0.0, ge=0)


class Simulation(_Model):
    """The whole ``simulation:`` section."""

    seed: int = 1
    duration: float = 60.0
    settle: float = Field(default=10.0, description="windows ending this close to the end are not checked")
    warmup: float = Field(default=0.0, ge=0, description="results of the first seconds are left out of latencies")
    wan: WanDefaults = WanDefaults()
    links: list[LinkSpec] = Field(default_factory=list)
    sensors: dict[str, dict[str, SensorSpec]] = Field(default_factory=dict)

    @field_validator("duration", "settle", "warmup", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return _seconds(value)


class Wan(_Model):
    """The emulated parameters of one link, resolved from both sections."""

    a: str
    b: str
    delay_ms: float
    jitter_ms: float
    bandwidth_mbps: float | None


def parse_simulation(sites: Sites, where: str = "sites.yaml") -> Simulation:
    """Validate ``sites.simulation`` against the sites; errors name the field and the fix."""
    if not sites.simulation:
        msg = (
            f"{where} has no simulation: section; add one with sensors per spoke, e.g.\n"
            "simulation:\n  sensors:\n    <spoke>:\n      <stream>: {count: 10, rate: 2}"
        )
        raise InvalidSites(msg)
    try:
        sim = Simulation.model_validate(sites.simulation)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in ("simulation", *err["loc"]))
            problems.append(f"{where}: {field}: {err['msg']} (got {err.get('input')!r})")
        msg = "invalid simulation section:\n  " + "\n  ".join(problems)
        raise InvalidSites(msg) from None
    for site, streams in sim.sensors.items():
        known = sites.site(site)
        for stream in streams:
            if stream not in known.streams:
                msg = (
                    f"{where}: simulation.sensors.{site}.{stream}: site '{site}' does not source stream "
                    f"'{stream}' (it sources: {', '.join(known.streams) or 'nothing'}); add it under the site's streams:"
                )
                raise InvalidSites(msg)
    for i, link in enumerate(sim.links):
        for end in link.between:
            if end not in sites.sites:
                msg = f"{where}: simulation.links[{i}]: unknown site {end!r}; known sites: {', '.join(sites.sites)}"
                raise InvalidSites(msg)
    if not sim.sensors:
        msg = f"{where}: simulation.sensors is empty; give each spoke the sensors of the streams it sources"
        raise InvalidSites(msg)
    return sim


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
