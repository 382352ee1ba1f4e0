"""The hub's data plane as a child process (``python -m hub.dataplane``) for tests that kill it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.integration.hubkit import ROOT

SITES = """
sites:
  cloud: {tier: hub, broker: "BROKER"}
  s1:
    tier: spoke
    broker: "BROKER"
    streams:
      readings: {topic: "r/#", rate: 100}
"""


class Dataplane:
    """``python -m hub.dataplane`` in its own process group."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log = log
        self.ready = threading.Event()
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> None:
        self.ready.clear()
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hub.dataplane", *self.args],
            stdout=subprocess.PIPE,
            stderr=self.log.open("a"),
            text=True,
            cwd=ROOT,
            env=env,
            start_new_session=True,
        )
        threading.Thread(target=self._watch, args=(self.proc,), daemon=True).start()

    def _watch(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "dataplane ready":
                self.ready.set()

    def kill(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self) -> int | None:
        """SIGTERM to the process group (Spark's JVM too), SIGKILL after a minute; the exit code (None: not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(timeout=30)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def read_parquet(folder: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    files = sorted(folder.glob("*-batch-*.parquet"))
    return [row for f in files for row in pq.read_table(f).to_pylist()]
