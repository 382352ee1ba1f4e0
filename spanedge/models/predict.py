"""The function of a ``predict`` operator, and the versions it can score with in this process.

:data:`INSTALLED` holds, per app and model, the verified versions this
process may use, each from an event-time switch on: a record is scored by
the newest version whose switch is at or before its event time (a record
before every switch by the oldest held). Installing a version never touches
any operator's window state. At the hub the function reads the versions the
hub sent out from its model folder instead (:meth:`Predictor.at_hub`,
:mod:`spanedge.models.shelf`), so Spark's workers score with the same
versions and switch times as the sites.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from spanedge.errors import SpanEdgeError
from spanedge.models.drift import SCORED
from spanedge.models.installed import INSTALLED, KEPT_VERSIONS, InstalledModels
from spanedge.models.shelf import shelf_of
from spanedge.models.spec import Algorithm, ModelSpec
from spanedge.models.version import ModelVersion, features_of

__all__ = ["INSTALLED", "KEPT_VERSIONS", "InstalledModels", "ModelNotReady", "Predictor"]


class ModelNotReady(SpanEdgeError, LookupError):
    """No version of a model is installed where a record is scored."""


@dataclass
class Predictor:
    """Adds ``output`` to each record: the probability of label 1, the regression's value or the cluster.

    ``app`` and ``spec`` name the model; ``pinned`` is the version a pickled
    copy carries when no other is found; ``shelf`` the hub's model folder
    (see the module docstring).
    """

    app: str
    spec: ModelSpec
    output: str
    pinned: ModelVersion | None = None
    shelf: str | None = field(default=None, repr=False, compare=False)

    def at_hub(self, folder: str) -> Predictor:
        """A copy that scores with the versions the hub sent out, kept under ``folder`` (``<state_dir>/models``)."""
        return replace(self, shelf=folder)

    def version_for(self, event_time: float | None) -> ModelVersion:
        """The version that scores a record at ``event_time``.

        Raises:
            ModelNotReady: no version is installed here yet.
        """
        if self.shelf is not None:
            version = shelf_of(self.shelf).pick(self.app, self.spec.name, event_time) or self.pinned
        else:
            version = INSTALLED.pick(self.app, self.spec.name, event_time) or self.pinned
        if version is None:
            msg = (
                f"model '{self.spec.name}' of app '{self.app}' has no trained version here yet; "
                f"train it (POST /apps/{self.app}/models/{self.spec.name}/train) or wait for its schedule"
            )
            raise ModelNotReady(msg)
        return version

    def __call__(self, value: Any, event_time: float | None = None) -> Any:
        """Score ``value`` and return it with the ``output`` field added.

        Raises:
            ModelNotReady: no version is installed here yet.
            ValueError: the record lacks a feature, or has one that is not a number.
        """
        version = self.version_for(event_time)
        x = features_of(value, version.features, version.model)
        score = version.params.score(x)
        if self.shelf is None:  # at a site: the drift of what it scores is measured (spanedge.models.drift)
            SCORED.observe(version, x, score, value.get(self.spec.label) if self.spec.label else None)
        out = dict(value)
        out[self.output] = int(score) if self.spec.algorithm is Algorithm.KMEANS else score
        return out

    def __getstate__(self) -> dict[str, Any]:
        """Pickle with the newest installed version pinned."""
        state = dict(self.__dict__)
        state["pinned"] = INSTALLED.pick(self.app, self.spec.name) or self.pinned
        return state
