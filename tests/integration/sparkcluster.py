"""A Spark standalone cluster on this machine, started from the pyspark installation itself."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from simulate.ports import free_port


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


class StandaloneCluster:
    """A master and ``workers`` workers (``spark-class ...Master`` / ``...Worker``) on free ports.

    Each worker offers ``cores`` cores and ``memory`` of executor memory; logs go to ``log_dir``.
    """

    def __init__(self, log_dir: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.log_dir = log_dir
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.port = free_port()
        self.ui_port = free_port()
        while self.ui_port == self.port:
            self.ui_port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> None:
        home = spark_home()
        env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1"}
        log = (self.log_dir / f"{name}.log").open("wb")
        command = [str(home / "bin" / "spark-class"), *args]
        self.procs.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env))

    def state(self) -> dict[str, Any]:
        """The master's JSON view (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as answer:
            return dict(json.load(answer))

    def alive_workers(self) -> int:
        """Workers the master lists as alive; 0 while its web UI is not up or not yet serving its JSON view."""
        try:
            return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")
        except (OSError, ValueError):  # on a loaded machine the UI can answer /json/ with a page before it is ready
            return 0

    def start(self, timeout: float = 180.0) -> StandaloneCluster:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port),
        )  # fmt: skip
        taken = {self.port, self.ui_port}
        for i in range(self.workers):
            ui = free_port()
            while ui in taken:
                ui = free_port()
            taken.add(ui)
            work = self.log_dir / f"worker-{i}"
            work.mkdir(exist_ok=True)
            self._spawn(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1", "--cores", str(self.cores), "--memory", self.memory,
                "--webui-port", str(ui), "--work-dir", str(work), self.url,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers:
            if any(p.poll() is not None for p in self.procs):
                self.close()
                msg = f"a Spark cluster process exited; see the logs in {self.log_dir}"
                raise RuntimeError(msg)
            if time.monotonic() > deadline:
                self.close()
                msg = f"{self.workers} workers did not register with the master in {timeout:.0f}s; see {self.log_dir}"
                raise TimeoutError(msg)
            time.sleep(0.5)
        return self

    def close(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
