"""Model versions for tests: a small logistic regression with made-up training statistics."""

from __future__ import annotations

from spanedge.models.portable import Logistic
from spanedge.models.stats import FeatureStats
from spanedge.models.version import ModelVersion


def make_version(
    app: str = "plant",
    model: str = "wear",
    number: int = 1,
    bias: float = 0.0,
    switch_at: float | None = None,
) -> ModelVersion:
    """Version ``number`` of ``app``'s ``model``: ``p = 1 / (1 + exp(-(rms - peak + bias)))``."""
    stats = [
        FeatureStats(field=f, mean=0.0, std=1.0, min=-3.0, max=3.0, edges=[-1.0, 0.0, 1.0], shares=[0.2, 0.3, 0.3, 0.2])
        for f in ("rms", "peak")
    ]
    return ModelVersion(
        app=app,
        model=model,
        version=number,
        algorithm="logistic_regression",
        features=["rms", "peak"],
        label="failed",
        trained_at=1.0,
        reason="test",
        rows=10,
        held_out=2,
        time_from=0.0,
        time_to=9.0,
        metrics={"auc": 0.9},
        stats=stats,
        params=Logistic(coefficients=[1.0, -1.0], intercept=bias),
        switch_at=switch_at,
    )
