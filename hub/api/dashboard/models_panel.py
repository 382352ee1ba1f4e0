"""The dashboard's model panel: each model of an app, its newest versions and what each site scores with.

A version shows why it was trained, on how many rows and its held-out
metrics; a site shows the version it was sent, the one it holds and its last
drift report (PSI against the training statistics, live error where labels
arrive). The same figures as ``GET /apps/{name}/models/{model}``, without the
feature statistics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from hub.api.model_routes import model_sites, version_view

if TYPE_CHECKING:
    from hub.models.service import ModelService

MAX_VERSIONS = 20
"""The most versions of a model the panel lists (the newest); the API lists them all."""


class ModelPanel(TypedDict):
    """One model of an app: its declaration's gist, its newest versions (newest first) and its sites."""

    model: str
    algorithm: str
    features: list[str]
    max_psi: float | None
    max_error: float | None
    version_count: int
    versions: list[dict[str, Any]]
    sites: dict[str, dict[str, Any]]


def model_panels(service: ModelService | None, app: str) -> list[ModelPanel]:
    """The panel of each model ``app`` declares, by name; empty without a model service or models."""
    if service is None:
        return []
    try:
        declared = service.app_of(app).models
    except KeyError:
        return []
    panels: list[ModelPanel] = []
    for name, spec in sorted(declared.items()):
        numbers = service.registry.numbers(app, name)  # only the shown versions are read, once a second
        shown = [version_view(service, service.registry.get(app, name, n)) for n in reversed(numbers[-MAX_VERSIONS:])]
        for view in shown:
            view.pop("stats", None)
        panels.append(
            {
                "model": name,
                "algorithm": str(spec.algorithm),
                "features": list(spec.features),
                "max_psi": spec.max_psi,
                "max_error": spec.max_error,
                "version_count": len(numbers),
                "versions": shown,
                "sites": model_sites(service, app, name),
            }
        )
    return panels
