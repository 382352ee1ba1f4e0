"""The shapes of the REST API's answers, for validation and for the OpenAPI document at ``/docs``.

Every route declares one of these as its ``response_model``; every error is
an :class:`ErrorResponse`. Fields an agent reports in its heartbeat are
typed as the agent sends them, and a value of another type is shown as
``null`` rather than failing the whole answer.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from spanedge.keyrange import KEY_SPACE
from spanedge.numbers import count, number


def _mapping(value: Any) -> dict[str, Any]:
    return {str(k): v for k, v in value.items()} if isinstance(value, dict) else {}


def _names(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list | tuple) else []


Reported = Annotated[float | None, BeforeValidator(number)]
"""A number from a heartbeat: ``null`` when the agent sent none or something else."""
ReportedCount = Annotated[int | None, BeforeValidator(count)]
"""A count from a heartbeat: ``null`` when the agent sent none or something else."""
ReportedMapping = Annotated[dict[str, Any], BeforeValidator(_mapping)]
"""An object from a heartbeat: ``{}`` when the agent sent none or something else."""


class ErrorResponse(BaseModel):
    """Every error the API answers: the kind of error and a message for people."""

    error: str = Field(description="the kind of error: InvalidDataflow, InvalidSites, NotFound, Unauthorized, ...")
    detail: str = Field(description="what went wrong and how to fix it")


# -- hub -------------------------------------------------------------------------------------------


class HealthResponse(BaseModel):
    """``GET /healthz``: the hub runs; the other fields appear when the hub reports them."""

    status: str = Field(description="always 'ok' when the hub answers")
    apps: int = Field(description="deployed apps")
    broker: str | None = Field(default=None, description="the hub's MQTT broker")
    broker_connected: bool | None = Field(default=None, description="the control plane is connected to it")
    spark: bool | None = Field(default=None, description="the Spark engine runs")
    ingest_connected: bool | None = Field(default=None, description="the MQTT ingest is connected")
    role: str | None = Field(default=None, description="with --ha: 'leader' or 'standby'")
    leader: str | None = Field(default=None, description="with --ha: the name of the hub that leads")
    epoch: int | None = Field(default=None, description="with --ha: the leader's epoch")
    leader_url: str | None = Field(
        default=None, description="with --ha: the REST URL the leader advertises (--ha-url), if known"
    )


# -- plans -----------------------------------------------------------------------------------------


class TotalsModel(BaseModel):
    """The cost of a placement (:class:`spanedge.plan.Totals`)."""

    wan_bytes_per_s: float
    worst_latency_ms: float
    mean_latency_ms: float
    objective: float
    hub_cpu: float = 0.0
    violations: list[str] = Field(default_factory=list, description="rules of the problem it breaks")


class BaselineModel(TotalsModel):
    """A baseline's totals and how the plan compares with it."""

    wan_ratio: float | None = Field(description="the plan's WAN bytes/s over the baseline's (null if it has none)")
    worst_latency_delta_ms: float = Field(description="the plan's worst latency minus the baseline's")


class AssignmentModel(BaseModel):
    """Where a replica runs and why (:class:`spanedge.plan.Assignment`)."""

    replica: str
    operator: str
    group: str | None = Field(description="the source site of a per-site replica; null for a singleton")
    site: str
    reason: str = ""
    since: int = Field(default=0, description="the plan version at which this site took the replica over")


class JoinModel(BaseModel):
    """A source site new to the app in this plan version (:class:`spanedge.plan.Join`)."""

    site: str
    switch_at: float = Field(
        description="event time (epoch seconds): the hub's windows starting here on take the site's records"
    )


class HandoverModel(BaseModel):
    """A replica moved between two sites, split at an event time (:class:`spanedge.plan.Handover`).

    Spoke to spoke, spoke to hub or hub to spoke; the hub's side is its Spark
    queries, the old placement's and the new one's side by side (:mod:`hub.handover.cutoffs`).
    """

    replica: str
    source: str = Field(description="the old owner: the windows starting before switch_at")
    target: str = Field(description="the new owner: the windows starting at or after switch_at")
    switch_at: float = Field(description="event time (epoch seconds)")
    epoch: int = Field(description="the old owner's epoch, which its records keep")
    keys_from: int = Field(default=0, description="the first key hash that moves (a split or merge by key)")
    keys_before: int = Field(default=KEY_SPACE, description="the end of the key hashes that move (exclusive)")
    recover_from: float | None = Field(
        default=None,
        description="the old owner is gone for good: recoverer recomputes its windows (or records) with results "
        "from this event time to switch_at from the sensor messages it spooled",
    )
    recoverer: str | None = Field(default=None, description="the replica's source site, which recomputes that part")


class KeyPartModel(BaseModel):
    """A share of a keyed replica's keys run at another site (:class:`spanedge.plan.KeyPart`)."""

    replica: str
    site: str
    keys_from: int = Field(description="the first key hash the part owns")
    keys_before: int = Field(description="the end of the key hashes it owns (exclusive), out of 2**32")
    since: int = Field(default=0, description="the plan version at which this site took the part over")
    reason: str = ""
    share: float | None = Field(
        default=None, description="the share of the replica's records the part takes, as measured (absent: assumed)"
    )


class FlowModel(BaseModel):
    """A replica-level edge with its estimated rates (:class:`spanedge.plan.Flow`)."""

    src: str
    dst: str
    rate: float = Field(description="records/s")
    bytes_per_s: float


class SolverModel(BaseModel):
    """How the placement was found (:class:`spanedge.plan.SolverInfo`)."""

    method: str
    status: str
    seconds: float
    gap: float | None = None


class PlanModel(BaseModel):
    """A whole plan, as agents receive it (:class:`spanedge.plan.Plan`)."""

    app: str
    version: int
    hub: str
    assignments: list[AssignmentModel]
    flows: list[FlowModel]
    totals: TotalsModel
    solver: SolverModel
    baselines: dict[str, TotalsModel] = Field(default_factory=dict)
    slo_ms: float | None = None
    warnings: list[str] = Field(default_factory=list)
    app_file: str = ""
    app_source: str = ""
    handovers: list[HandoverModel] = Field(default_factory=list)
    parts: list[KeyPartModel] = Field(default_factory=list, description="replicas split by key (absent if none)")
    joins: list[JoinModel] = Field(default_factory=list, description="source sites new to the app (absent if none)")


class MoveModel(BaseModel):
    """A replica whose site changed with a plan version."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    replica: str
    from_site: str = Field(alias="from", description="its site in the previous version")
    to_site: str = Field(alias="to", description="its site in this version")
    switch_at: float | None = Field(
        default=None, description="the handover's event time (epoch seconds): the new owner's windows start there"
    )
    state_bytes: int | None = Field(
        default=None, description="the state the replica held at its old site at the re-plan, as that site reported"
    )
    handed_over_at: float | None = Field(
        default=None, description="when the hub had every result the old owner owed for the move (epoch seconds)"
    )
    handover_s: float | None = Field(default=None, description="seconds from the re-plan to handed_over_at")
    at_risk_from: float | None = Field(
        default=None,
        description="the old owner was gone for good: its results from this event time (it had delivered all before, "
        "its local sinks' included) "
        "to switch_at are recomputed by recovered_by, or else lost unless it comes back by recover_by",
    )
    recovered_by: str | None = Field(
        default=None,
        description="the old owner was gone for good: this site (the replica's source site) recomputed its results "
        "from at_risk_from to switch_at from the sensor messages it spooled",
    )
    recover_by: float | None = Field(
        default=None,
        description="the old owner was gone for good: back by then (epoch seconds), it finishes its windows "
        "before switch_at from its checkpoint and persistent session",
    )
    back_at: float | None = Field(
        default=None,
        description="the old owner, gone for good, was heard from again then (epoch seconds): by recover_by, it "
        "finishes its windows before switch_at; the hub's windows that closed while it was gone stay without them",
    )


class KeyMoveModel(MoveModel):
    """A key range of a replica split by key whose site changed with a plan version."""

    keys: str = Field(description="the key range that moved, e.g. 'keys [50%, 100%)'")
    change: str = Field(description="split, merge, or keys (the ranges moved otherwise)")


class HistoryModel(BaseModel):
    """One plan version of an app: why it was made, what moved, its cost against the baselines."""

    version: int
    at: float = Field(description="epoch seconds")
    reason: str
    totals: TotalsModel
    changed: bool = Field(description="false for a re-plan that kept the placement (same version)")
    moved: list[KeyMoveModel | MoveModel] = Field(default_factory=list, description="replicas whose site changed")
    baselines: dict[str, TotalsModel] = Field(default_factory=dict, description="the baselines' totals then")


# -- apps ------------------------------------------------------------------------------------------


class AppSummary(BaseModel):
    """The short view of a deployed app."""

    app: str
    version: int
    deployed_at: float = Field(description="epoch seconds of the last deploy")
    filename: str
    source_sha256: str
    slo_ms: float | None
    weights: dict[str, float] | None
    sites: list[str] = Field(description="sites that run a replica")
    replicas: int
    hub_replicas: list[str]
    totals: TotalsModel
    last_change: HistoryModel | None


class AppList(BaseModel):
    """``GET /apps``."""

    apps: list[AppSummary]


class AppDetail(AppSummary):
    """``GET /apps/{name}``: the summary and the full plan."""

    plan: PlanModel


class PlacementView(BaseModel):
    """``GET /apps/{name}/placement``: every replica's site and reason, the baselines, the plan history."""

    app: str
    version: int
    hub: str
    solver: SolverModel
    replicas: list[AssignmentModel]
    totals: TotalsModel
    baselines: dict[str, BaselineModel]
    slo_ms: float | None
    warnings: list[str]
    handovers: list[HandoverModel] = Field(
        default_factory=list, description="moves between sites (spokes or the hub) still listed"
    )
    parts: list[KeyPartModel] = Field(default_factory=list, description="replicas split by key across sites")
    joins: list[JoinModel] = Field(
        default_factory=list, description="source sites new to the app still listed, and where the hub takes them in"
    )
    history: list[HistoryModel] = Field(description="oldest first")


class DeployResponse(BaseModel):
    """``POST /apps``: the new plan, where it was published, and the app's plan history."""

    app: str
    version: int
    plan: PlanModel
    distribution: dict[str, str] = Field(description="per site: published, or why not")
    history: list[HistoryModel]
    rollout: dict[str, Any] | None = Field(
        default=None, description="a staged rollout started: GET /apps/{name}/rollout answers where it is"
    )


class DeleteResponse(BaseModel):
    """``DELETE /apps/{name}``."""

    deleted: str
    distribution: dict[str, str] = Field(description="per site: published, or why not")


# -- sites -----------------------------------------------------------------------------------------


class SiteLinkModel(BaseModel):
    """The current estimate of the link from a site to one peer."""

    latency_ms: float
    p95_ms: float
    source: str = Field(description="measured, declared, path or default")
    age_s: float | None = Field(description="age of the measurement; null when not measured")


class SiteStatus(BaseModel):
    """A site's declared facts and its live state from its last heartbeat."""

    site: str
    tier: str
    broker: str
    labels: dict[str, str] = Field(default_factory=dict, description="the site's labels (sites.yaml or site add)")
    revoked: bool = Field(default=False, description="the site was revoked: its certificate and messages are refused")
    joining: bool = Field(
        default=False,
        description="added with 'spanedge site add' and not heard from yet: planned nowhere until its first heartbeat",
    )
    streams: dict[str, float] = Field(description="declared records/s per stream it sources")
    alive: bool
    last_heartbeat_age_s: float | None
    apps: Annotated[list[str], BeforeValidator(_names)]
    operators: ReportedMapping = Field(description="per replica: records in and out, and their rates")
    watermark_lag_s: Reported
    outbox: ReportedMapping = Field(description="records and bytes waiting for the hub, sent, dropped")
    dlq: ReportedCount = Field(description="records dead-lettered since the agent started")
    late: ReportedCount
    overload_dropped: ReportedCount
    cpu_percent: Reported = Field(description="percent of one core")
    rss_bytes: ReportedCount
    clock_offset_ms: Reported
    plan_expired: bool = Field(
        default=False, description="the site runs a plan past its expiry: the hub has not re-issued it"
    )
    result_latency: ReportedMapping = Field(
        default_factory=dict,
        description="per app, per local sink: p50_ms and p95_ms of its results' latency over the last minute, and results",
    )
    connectors: ReportedMapping = Field(
        default_factory=dict,
        description=(
            "per connector stream and sink (sink <app>/<operator>) of the site's agent: server, up, "
            "reconnects (failed attempts) and last_error"
        ),
    )
    counters: ReportedMapping = Field(
        default_factory=dict,
        description="per app: dlq, late and errors (records a user's function raised on) since the agent started",
    )
    rejected_heartbeats: int
    latency: dict[str, SiteLinkModel]


class SitesResponse(BaseModel):
    """``GET /sites``."""

    down_after_s: float = Field(description="a site is down after this many seconds without a heartbeat")
    sites: list[SiteStatus]


class LinkModel(BaseModel):
    """The one-way latency estimate of an ordered site pair: measured if fresh, else declared."""

    src: str
    dst: str
    latency_ms: float
    p95_ms: float
    declared_ms: float
    bandwidth_mbps: float
    cost: float
    source: str = Field(description="measured, declared, path or default")
    age_s: float | None
    samples: int = Field(description="the probes behind the last report")
    spread_ms: float | None = Field(default=None, description="its noise (interquartile range); null if declared")
    reports: int = Field(default=0, description="reports in the window the estimate is made of")
    measured_at: str | None = Field(default=None, description="ISO time of the measurement")


class LatencyResponse(BaseModel):
    """``GET /latency``."""

    generated_at: float = Field(description="epoch seconds")
    window_s: float = Field(description="a measured link's estimate is a trimmed mean of this many seconds of reports")
    stale_after_s: float = Field(description="a measurement older than this gives way to the declared value")
    links: list[LinkModel]


# -- error responses per route ---------------------------------------------------------------------

_MEANING = {
    400: "the request is malformed",
    401: "no bearer token, or an unknown one",
    403: "the token's scope does not allow this",
    404: "no such app is deployed",
    409: "the request conflicts with where the app is (a rollout rolled back already, say)",
    413: "the request body is over 4 MiB",
    422: "the request, the app, its sites or its placement is invalid",
    429: "too many refused attempts lately; wait a minute",
    500: "the hub failed; the message says why",
}


def errors(*codes: int, **meanings: str) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route that may answer ``codes``, each an :class:`ErrorResponse`.

    ``meanings`` replaces a code's description, keyed ``e<code>`` (e.g. ``e422="..."``).
    """
    return {code: {"model": ErrorResponse, "description": meanings.get(f"e{code}", _MEANING[code])} for code in codes}


def errors_of_text_route(*codes: int) -> dict[int | str, dict[str, Any]]:
    """Like :func:`errors`, for a route whose own answer is not JSON (``/metrics``, the event stream).

    FastAPI would list such a route's errors under its own media type; they are JSON.
    The schema is a reference to :class:`ErrorResponse`, which the API's other routes register.
    """
    schema = {"$ref": "#/components/schemas/ErrorResponse"}
    return {
        code: {"description": _MEANING[code], "content": {"application/json": {"schema": schema}}} for code in codes
    }
