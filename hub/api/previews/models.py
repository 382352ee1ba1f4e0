"""The body of ``POST /apps/{name}/previews`` and the answers of the preview routes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from hub.api.previews.limits import KEEP, MAX_LABEL_CHARS, MAX_OPERATORS, MAX_REASON_CHARS
from spanedge.names import MAX_STREAM_NAME_BYTES, SITE_NAME_PATTERN

#: Text without control characters (file names, labels, reasons, operator names).
TEXT_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]+$"
#: A count in a summary: at most the largest integer a JSON reader holds exactly.
MAX_COUNT = 2**53
#: The latest epoch time a summary may carry (the year 5138).
MAX_EPOCH_S = 1e11


class OperatorCounts(BaseModel):
    """What one version of the app did at one operator."""

    model_config = ConfigDict(extra="forbid")

    records_in: int | None = Field(ge=0, le=MAX_COUNT, description="records it took (null: not evaluated)")
    records_out: int | None = Field(ge=0, le=MAX_COUNT, description="records it gave (null: not evaluated)")
    dead_letters: int = Field(ge=0, le=MAX_COUNT)


class OperatorPreview(BaseModel):
    """One operator, side by side: the live version's figures and the candidate's (null: the version lacks it)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=MAX_STREAM_NAME_BYTES, pattern=TEXT_PATTERN)
    part: Literal["edge", "hub"] = Field(description="edge: one replica per site; hub: once, over every site")
    live: OperatorCounts | None
    candidate: OperatorCounts | None


class RunPreview(BaseModel):
    """One version's totals over the records read."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    version: str = Field(
        min_length=1,
        max_length=MAX_LABEL_CHARS,
        pattern=TEXT_PATTERN,
        description="how the preview names it: the hub's label (hub v3) or a file name",
    )
    dead_letters: int = Field(ge=0, le=MAX_COUNT)
    cpu_per_record_s: float | None = Field(
        ge=0, le=3600, description="process CPU seconds per record read (null: no records)"
    )


class PreviewReport(BaseModel):
    """``POST /apps/{name}/previews``: the summary of a live preview, as ``spanedge preview --site --for`` sends it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    candidate_file: str = Field(
        min_length=1, max_length=MAX_LABEL_CHARS, pattern=TEXT_PATTERN, description="the candidate's file name"
    )
    candidate_sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="the SHA-256 of the candidate's source")
    site: str = Field(pattern=SITE_NAME_PATTERN, description="the site whose live input was read")
    duration_s: float = Field(gt=0, le=600, description="how long the preview was to read (--for)")
    started_at: float = Field(ge=0, le=MAX_EPOCH_S, description="when the read began, in epoch seconds")
    ended_at: float = Field(ge=0, le=MAX_EPOCH_S, description="when the read ended, in epoch seconds")
    records: int = Field(ge=0, le=MAX_COUNT, description="the records read")
    live: RunPreview | None = Field(description="the version running now (null: none compared)")
    candidate: RunPreview
    operators: list[OperatorPreview] = Field(max_length=MAX_OPERATORS, description="in the candidate's order")
    operators_left_out: int = Field(
        default=0, ge=0, le=MAX_COUNT, description=f"operators past the first {MAX_OPERATORS}"
    )
    differing_results: int | None = Field(
        ge=0, le=MAX_COUNT, description="sink results one version has and the other has not (null: none compared)"
    )
    stopped_early: bool = Field(description="whether the read ended before its time")
    stop_reason: str | None = Field(
        default=None, max_length=MAX_REASON_CHARS, pattern=TEXT_PATTERN, description="why it ended early"
    )

    @model_validator(mode="after")
    def _consistent(self) -> PreviewReport:
        if self.ended_at < self.started_at:
            msg = f"ended_at ({self.ended_at}) is before started_at ({self.started_at})"
            raise ValueError(msg)
        if self.stop_reason is not None and not self.stopped_early:
            msg = "stop_reason is given but stopped_early is false; send stopped_early: true with a reason"
            raise ValueError(msg)
        return self


class PreviewView(PreviewReport):
    """A preview the hub keeps: the summary as posted, with the app and when the hub received it."""

    app: str
    received_at: float = Field(description="epoch seconds (the hub's clock)")


class PreviewList(BaseModel):
    """``GET /apps/{name}/previews``: the app's last previews, newest first."""

    app: str
    keep: int = Field(default=KEEP, description="how many previews the hub keeps per app")
    previews: list[PreviewView]
