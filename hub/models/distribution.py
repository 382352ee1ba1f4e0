"""Sending model versions to the sites that score with them: signed, retained, with an event-time switch.

A version goes out on :func:`spanedge.models.envelope.model_topic`
(``spanedge/v1/control/<site>/model/<app>/<model>``), retained and at QoS 1,
to every site where the app's plan puts a replica of a ``predict`` operator of
that model (:func:`predict_sites`). Sending it fixes its switch time
``switch_at``, an event time: the hub writes it into the version's file and
signs the version again with it (:class:`hub.models.registry.ModelRegistry`),
so the switch travels inside the signature and the hub's own queries read it
from the same file (:mod:`spanedge.models.shelf`).

The switch is :data:`SWITCH_DELAY_S` past the newest event time the sites
reported as done (``complete`` in their heartbeats) or, when none did, past
the hub's clock: records before it are scored by the old version, records
after by the new one, wherever they are scored. :meth:`ModelDistributor.sync`,
run after each plan is sent, gives a site the plan newly puts a predict at the
newest version that was sent out.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec

from hub.models.registry import ModelRegistry
from spanedge.app import App
from spanedge.models.envelope import model_topic
from spanedge.models.version import ModelVersion
from spanedge.operators import Kind
from spanedge.plan import Plan

log = logging.getLogger(__name__)

#: A new version switches in this many seconds of event time after the newest the sites reported.
SWITCH_DELAY_S = 10.0
#: ``sync`` looks this many versions back for the newest one sent out.
LOOK_BACK = 20

PublishAll = Callable[[Sequence[tuple[str, bytes]]], list[bool]]
"""Publishes retained QoS 1 messages; per message, whether the broker acknowledged it."""


def predict_sites(app: App, plan: Plan) -> dict[str, set[str]]:
    """Per model of ``app``, the sites (the hub left out) where ``plan`` runs, or hands over, a predict of it."""
    models = {
        op.name: op.model.name for op in app.operators.values() if op.kind is Kind.PREDICT and op.model is not None
    }
    out: dict[str, set[str]] = {name: set() for name in app.models}
    operator_of = {a.replica: a.operator for a in plan.assignments}
    for a in plan.assignments:
        if a.operator in models and a.site != plan.hub:
            out[models[a.operator]].add(a.site)
    for h in plan.handovers:
        model = models.get(operator_of.get(h.replica, ""))
        if model is not None:
            out[model].update(s for s in (h.source, h.target) if s != plan.hub)
    return out


class ModelDistributor:
    """Fixes each new version's switch time, signs it and publishes it to the sites that predict with it.

    Args:
        registry: the versions, and the hub's plan key they are signed with.
        publish_all: the hub's control connection (:meth:`hub.control.distribution.MqttControl.publish_all`).
    """

    def __init__(self, registry: ModelRegistry, publish_all: PublishAll) -> None:
        """Send through ``publish_all``."""
        self.registry = registry
        self._publish_all = publish_all
        self._lock = threading.Lock()
        # (site, app, model): the version the broker acknowledged for it
        self._delivered: dict[tuple[str, str, str], int] = {}
        # (app, model): the newest version sent out, once read (this process is the registry's one writer)
        self._sent: dict[tuple[str, str], ModelVersion] = {}

    def release(self, version: ModelVersion, sites: Iterable[str], switch_at: float) -> ModelVersion:
        """Send ``version`` to ``sites``, in force from event time ``switch_at``; return it with its switch.

        Raises:
            ValueError: the registry has no plan key to sign with.
        """
        if self.registry.key is None:
            msg = "the hub has no plan key, so it cannot sign model versions; start it with its plan key"
            raise ValueError(msg)
        sent = msgspec.structs.replace(version, switch_at=float(switch_at))
        self.registry.save(sent)
        self._sent[(version.app, version.model)] = sent
        log.info(
            "model %s of app %s: version %d switches in at event time %.3f",
            version.model,
            version.app,
            version.version,
            switch_at,
        )
        with self._lock:
            self._send(sent, sorted(set(sites)))
        return sent

    def latest_sent(self, app: str, model: str) -> ModelVersion | None:
        """The newest version of ``app``'s ``model`` that was sent out, None if none was."""
        known = self._sent.get((app, model))
        if known is not None:
            return known
        for number in reversed(self.registry.numbers(app, model)[-LOOK_BACK:]):
            try:
                version = self.registry.get(app, model, number)
            except (KeyError, ValueError):
                continue
            if version.switch_at is not None:
                self._sent[(app, model)] = version
                return version
        return None

    def sync(self, app: str, sites_by_model: Mapping[str, set[str]]) -> dict[str, str]:
        """Send each model's newest version sent out to those of its sites that do not have it yet.

        Returns:
            ``{"<site>/<model>": "published" | "pending"}`` of what was sent.
        """
        result: dict[str, str] = {}
        with self._lock:
            for model, sites in sorted(sites_by_model.items()):
                version = self.latest_sent(app, model)
                if version is None:
                    continue
                todo = [s for s in sorted(sites) if self._delivered.get((s, app, model)) != version.version]
                result.update(self._send(version, todo))
        return result

    def where(self, app: str, model: str) -> dict[str, int]:
        """The version each site's broker acknowledged for ``app``'s ``model``, by site."""
        with self._lock:
            return {s: v for (s, a, m), v in sorted(self._delivered.items()) if (a, m) == (app, model)}

    def _send(self, version: ModelVersion, sites: list[str]) -> dict[str, str]:
        if not sites:
            return {}
        message = self.registry.signed(version.app, version.model, version.version)
        if message is None:
            return {}
        acked = self._publish_all([(model_topic(s, version.app, version.model), message) for s in sites])
        result = {}
        for site, ok in zip(sites, acked, strict=True):
            key = (site, version.app, version.model)
            if ok:
                self._delivered[key] = version.version
            else:
                self._delivered.pop(key, None)
            result[f"{site}/{version.model}"] = "published" if ok else "pending"
            log.info(
                "model %s of app %s: version %d for site %s: %s",
                version.model,
                version.app,
                version.version,
                site,
                result[f"{site}/{version.model}"],
            )
        return result


def switch_time(completes: Iterable[float | None], now: float) -> float:
    """The switch of a version sent now: :data:`SWITCH_DELAY_S` past the newest ``complete`` reported, else ``now``."""
    known = [c for c in completes if c is not None]
    return (max(known) if known else now) + SWITCH_DELAY_S


def release_to_plans(
    distributor: ModelDistributor,
    version: ModelVersion,
    app: App,
    plans: Iterable[Plan],
    complete_of: Callable[[str], float | None],
    now: float,
) -> ModelVersion:
    """Send ``version`` to every site where ``plans`` predict with it, switching in after what they reported done."""
    sites: set[str] = set()
    for plan in plans:
        sites |= predict_sites(app, plan).get(version.model, set())
    switch_at = switch_time((complete_of(s) for s in sorted(sites)), now)
    return distributor.release(version, sites, switch_at)
