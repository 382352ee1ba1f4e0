"""Model intake: verify the signed versions the hub sends a site, keep and install the ones it accepts.

The hub publishes each version, retained, on
``spanedge/v1/control/<site>/model/<app>/<model>``
(:func:`spanedge.models.envelope.model_topic`). :class:`ModelIntake` opens it
with :func:`spanedge.models.envelope.open_model`, which refuses an unsigned
or tampered message, a key the agent does not trust, a version of another
app or model than its topic names, and a version not newer than the one held;
each refusal is a WARNING line naming why, and the versions held stay in
force. An accepted version is kept (:class:`edge_agent.models.store.ModelStore`)
and installed for the predict operators of this process
(:data:`spanedge.models.installed.INSTALLED`) from its switch time on: no
pipeline is rebuilt and no window state is touched.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from edge_agent.models.store import ModelStore
from spanedge.logsafe import escaped
from spanedge.models.drift import SCORED
from spanedge.models.envelope import RefusedModel, model_filter, open_model, parse_model_topic
from spanedge.models.installed import INSTALLED, InstalledModels
from spanedge.models.version import ModelVersion

if TYPE_CHECKING:
    from spanedge.signing import TrustedKeys

log = logging.getLogger(__name__)


class ModelIntake:
    """Checks the model messages for one site and installs the versions it accepts.

    Args:
        site: the site this agent serves.
        trusted: the hub's public keys this agent trusts.
        store: where accepted versions are kept.
        installed: the versions the site's predict operators score with.
    """

    def __init__(
        self, site: str, trusted: TrustedKeys, store: ModelStore, installed: InstalledModels = INSTALLED
    ) -> None:
        self.site = site
        self.trusted = trusted
        self.store = store
        self.installed = installed
        self._last: dict[tuple[str, str], bytes] = {}  # the last message accepted per model
        self.refused = 0

    @property
    def topic_filter(self) -> str:
        """The topic filter of this site's model messages."""
        return model_filter(self.site)

    def handles(self, topic: str) -> bool:
        """True if ``topic`` is one of this site's model topics."""
        return parse_model_topic(topic, self.site) is not None

    def restore(self) -> int:
        """Install the versions kept before a restart, verified again; return how many were."""
        count = 0
        for app, model, number, message in self.store.load():
            try:
                version = self._open(app, model, message)
            except RefusedModel as exc:
                log.warning("ignoring the kept model version %d of %s/%s: %s", number, app, model, escaped(exc))
                continue
            self._install(version, message)
            count += 1
        if count:
            log.info("installed %d model versions kept before the restart", count)
        return count

    def receive(self, topic: str, message: bytes) -> ModelVersion | None:
        """Take a model message from the hub; return the version installed, or None (refused or already held)."""
        names = parse_model_topic(topic, self.site)
        if names is None or not message:
            return None
        app, model = names
        if self._last.get(names) == message:
            log.info("model %s of app %s: the broker delivered the version held again", model, app)
            return None
        try:
            version = self._open(app, model, message)
        except RefusedModel as exc:
            self.refused += 1
            log.warning("refused model message on %s: %s", escaped(topic), escaped(exc))
            return None
        self.store.save(app, model, version.version, message)
        self._install(version, message)
        switch = "from the start" if version.switch_at is None else f"from event time {version.switch_at:.3f}"
        log.info("model %s of app %s: installed version %d, scoring %s", model, app, version.version, switch)
        return version

    def held(self) -> dict[str, dict[str, int]]:
        """Per app, per model, the newest version installed."""
        out: dict[str, dict[str, int]] = {}
        for (app, model), entries in self.installed.installed().items():
            if entries:
                out.setdefault(app, {})[model] = max(number for _, number in entries)
        return out

    def report(self) -> dict[str, dict[str, dict[str, float]]]:
        """The heartbeat's ``models``: per app, per model, the version held and the drift of what was scored."""
        drift = SCORED.report()
        out: dict[str, dict[str, dict[str, float]]] = {}
        for app, models in self.held().items():
            for model, held in models.items():
                out.setdefault(app, {})[model] = {"held": float(held), **drift.get(app, {}).get(model, {})}
        return out

    def _open(self, app: str, model: str, message: bytes) -> ModelVersion:
        return open_model(message, self.trusted, app=app, model=model, held=self.installed.held(app, model))

    def _install(self, version: ModelVersion, message: bytes) -> None:
        self.installed.install(version)
        self._last[(version.app, version.model)] = message
