"""The function of a ``predict`` operator, and the versions it can score with in this process.

:data:`INSTALLED` holds, per app and model, the verified versions this
process may use, each from an event-time switch on: a record is scored by
the newest version whose switch is at or before its event time (a record
before every switch by the oldest held). Installing a version never touches
any operator's window state. The hub compiles its queries with the newest
version pinned in the pickled function (:meth:`Predictor.__getstate__`).
"""

from __future__ import annotations

import bisect
import math
import threading
from dataclasses import dataclass
from typing import Any

from spanedge.errors import SpanEdgeError
from spanedge.models.spec import Algorithm, ModelSpec
from spanedge.models.version import ModelVersion

#: Versions kept per model: the one in force and the ones still due to switch in.
KEPT_VERSIONS = 3


class ModelNotReady(SpanEdgeError, LookupError):
    """No version of a model is installed where a record is scored."""


class InstalledModels:
    """The versions a process may score with, per ``(app, model)``, by event-time switch."""

    def __init__(self) -> None:
        """Start with none."""
        self._lock = threading.Lock()
        self._by_model: dict[tuple[str, str], list[tuple[float, int, ModelVersion]]] = {}

    def install(self, version: ModelVersion, switch_at: float = -math.inf) -> None:
        """Use ``version`` for records at or after event time ``switch_at`` (keeping :data:`KEPT_VERSIONS`)."""
        key = (version.app, version.model)
        with self._lock:
            held = [e for e in self._by_model.get(key, []) if e[1] != version.version]
            held.append((switch_at, version.version, version))
            held.sort(key=lambda e: (e[0], e[1]))
            self._by_model[key] = held[-KEPT_VERSIONS:]

    def held(self, app: str, model: str) -> int:
        """The newest version number held (0: none)."""
        with self._lock:
            return max((e[1] for e in self._by_model.get((app, model), [])), default=0)

    def pick(self, app: str, model: str, event_time: float | None = None) -> ModelVersion | None:
        """The version for a record at ``event_time`` (None: the newest), None if none is held."""
        with self._lock:
            held = self._by_model.get((app, model))
            if not held:
                return None
            if event_time is None:
                return held[-1][2]
            at = bisect.bisect_right([e[0] for e in held], event_time)
            return held[max(at - 1, 0)][2]

    def remove(self, app: str) -> None:
        """Forget every version of ``app``'s models."""
        with self._lock:
            for key in [k for k in self._by_model if k[0] == app]:
                del self._by_model[key]


INSTALLED = InstalledModels()
"""The versions this process scores with."""


@dataclass
class Predictor:
    """Adds ``output`` to each record: the probability of label 1, the regression's value or the cluster.

    ``app`` and ``spec`` name the model; ``pinned`` is the version a pickled
    copy carries (see the module docstring).
    """

    app: str
    spec: ModelSpec
    output: str
    pinned: ModelVersion | None = None

    def version_for(self, event_time: float | None) -> ModelVersion:
        """The version that scores a record at ``event_time``.

        Raises:
            ModelNotReady: no version is installed here yet.
        """
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
        score = version.score(value)
        out = dict(value)
        out[self.output] = int(score) if self.spec.algorithm is Algorithm.KMEANS else score
        return out

    def __getstate__(self) -> dict[str, Any]:
        """Pickle with the newest installed version pinned."""
        state = dict(self.__dict__)
        state["pinned"] = INSTALLED.pick(self.app, self.spec.name) or self.pinned
        return state
