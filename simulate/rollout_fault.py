"""The ``deploy`` fault: a new version of the app deployed mid-run, as a staged rollout or at once.

Its form is ``deploy:<app.py>[|<stages>[|<gates>[|<hold>]]]@<t>``, e.g.
``deploy:app_v2.py|kind=truck:1, *|dead_letter_rate<0.01|10s@20s``: the
fields after the file are ``spanedge deploy``'s ``--rollout``, ``--gate`` and
``--hold`` (``|`` separates them, as stage specs hold ``:`` and ``,``). Without
stages the new version goes to every site at once. The file is read relative
to the directory the simulation starts in. The run writes the rollout as the
hub answers ``GET /apps/{name}/rollout`` at its end to ``rollout.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanedge.durations import parse_duration

#: The form of the fault, for messages.
FORM = "deploy:<app.py>[|<stages>[|<gates>[|<hold>]]]@<t>"


@dataclass(frozen=True)
class DeploySpec:
    """What a ``deploy`` fault deploys, and how.

    Attributes:
        file: the new version's source file.
        stages: the rollout's stages (None: every site at once).
        gates: its gates (empty: none).
        hold: its hold, as written (None: the hub's default).
    """

    file: Path
    stages: str | None = None
    gates: str = ""
    hold: str | None = None

    def options(self) -> dict[str, Any]:
        """The deploy body's rollout fields (none for a deploy at once)."""
        if self.stages is None:
            return {}
        return {"rollout": self.stages, "gates": self.gates or None, "hold": self.hold}


def parse_deploy(head: str) -> DeploySpec:
    """The spec of a ``deploy`` fault from its text before ``@``.

    Raises:
        ValueError: a part is missing or malformed; the message says which.
    """
    _, _, rest = head.partition(":")
    parts = [p.strip() for p in rest.split("|")]
    if not parts[0]:
        msg = "deploy needs the new version's file: deploy:app_v2.py@20s"
        raise ValueError(msg)
    if len(parts) > 4:
        msg = f"deploy takes at most a file, stages, gates and a hold, got {len(parts)} parts"
        raise ValueError(msg)
    stages = parts[1] if len(parts) > 1 and parts[1] else None
    gates = parts[2] if len(parts) > 2 else ""
    hold = parts[3] if len(parts) > 3 and parts[3] else None
    if hold is not None:
        parse_duration(hold)
    if stages is None and (gates or hold):
        msg = "gates and a hold need stages: deploy:app_v2.py|*|dead_letter_rate<0.01|10s@20s"
        raise ValueError(msg)
    return DeploySpec(Path(parts[0]), stages, gates, hold)
