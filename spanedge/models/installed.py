"""The model versions a process may score with, by event-time switch (:data:`INSTALLED`)."""

from __future__ import annotations

import bisect
import math
import threading

from spanedge.models.version import ModelVersion

#: Versions kept per model: the one in force and the ones still due to switch in.
KEPT_VERSIONS = 3


class InstalledModels:
    """The versions a process may score with, per ``(app, model)``, by event-time switch."""

    def __init__(self) -> None:
        """Start with none."""
        self._lock = threading.Lock()
        self._by_model: dict[tuple[str, str], list[tuple[float, int, ModelVersion]]] = {}

    def install(self, version: ModelVersion, switch_at: float | None = None) -> None:
        """Use ``version`` for records at or after event time ``switch_at`` (keeping :data:`KEPT_VERSIONS`).

        ``switch_at`` defaults to the version's own switch time (from the start if it has none).
        """
        if switch_at is None:
            switch_at = version.switch_at if version.switch_at is not None else -math.inf
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

    def installed(self) -> dict[tuple[str, str], list[tuple[float, int]]]:
        """Per ``(app, model)``, the ``(switch_at, version)`` held, oldest switch first."""
        with self._lock:
            return {k: [(e[0], e[1]) for e in v] for k, v in self._by_model.items()}

    def remove(self, app: str) -> None:
        """Forget every version of ``app``'s models."""
        with self._lock:
            for key in [k for k in self._by_model if k[0] == app]:
                del self._by_model[key]


INSTALLED = InstalledModels()
"""The versions this process scores with."""
