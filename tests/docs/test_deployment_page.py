"""The deployment page, run as written: three real Mosquitto brokers, a hub with Spark and two agents.

The test reads ``docs/getting-started/deployment.md``, writes the file its ``sites.yaml`` block shows, and runs
its ``bash`` blocks in order, each in its own ``bash`` that starts from the environment the previous one
exported (as one terminal would). The page's ports are replaced by free ones. A block after
``<!-- deployment-test: skip ... -->`` (clone and install) is not run: the test uses the project's own
environment. A block after ``<!-- deployment-test: background -->`` (the ``mosquitto_sub`` commands the page runs
in other terminals) runs in the background with its output kept. Then the results must appear where the page
says: window summaries on truck-7's broker, alerts on the hub's broker, both trucks and the app in
``spanedge status``, the dashboard at the hub's root, a third truck's alerts once it joined, the broker
refusing it once revoked, and the stop block ends every process.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.conftest import missing_part
from tests.polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started" / "deployment.md"
PAGE_PORTS = (8883, 8884, 8885, 8000)
MARKER = re.compile(r"<!--\s*deployment-test:\s*(\w+)[^>]*-->\s*$")
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.S | re.M)

pytestmark = pytest.mark.timeout(1800)


@dataclass
class Block:
    """One fenced block of the page, with the marker comment just above it, if any."""

    lang: str
    info: str
    text: str
    marker: str | None


def page_blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text``, in order."""
    blocks = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.search(before)
        blocks.append(Block(match.group(1), match.group(2).strip(), match.group(3), marker and marker.group(1)))
    return blocks


@dataclass
class Run:
    """What running the page left: each foreground block's output, the background outputs, the process groups."""

    trial: Path
    ports: dict[int, int]
    outputs: list[tuple[str, str]] = field(default_factory=list)
    background: list[Path] = field(default_factory=list)
    groups: list[int] = field(default_factory=list)
    readers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    dashboard: tuple[int, str] = (0, "")

    def block_output(self, first_line: str) -> str:
        """The output of the foreground block whose text starts with ``first_line``."""
        for text, output in self.outputs:
            if text.startswith(first_line):
                return output
        raise AssertionError(f"no block of the page starts with {first_line!r}")


def _substitute(text: str, ports: dict[int, int]) -> str:
    for old, new in ports.items():
        text = re.sub(rf"\b{old}\b", str(new), text)
    return text


def _log_of(trial: Path, name: str) -> str:
    path = trial / "logs" / name
    return path.read_text(errors="replace") if path.exists() else "(no log)"


def _check_parts() -> None:
    from simulate.broker import mosquitto_path
    from spanedge.errors import SpanEdgeError

    try:
        mosquitto_path()
    except SpanEdgeError as exc:
        missing_part(str(exc))
    for tool, package in (
        ("mosquitto_pub", "mosquitto-clients"),
        ("openssl", "openssl"),
        ("java", "openjdk-17-jre-headless"),
    ):
        if shutil.which(tool) is None:
            missing_part(f"{tool} is not installed: apt-get install -y {package}")
    if not Path("/usr/sbin/mosquitto").exists():
        missing_part("the page starts /usr/sbin/mosquitto: apt-get install -y mosquitto")


def _run_foreground(run: Run, block: Block, env: dict[str, str], env_file: Path) -> str:
    script = "set -eo pipefail\n"
    script += f'[ -f "{env_file}" ] && . "{env_file}"\n'
    script += _substitute(block.text, run.ports)
    script += f'\nexport -p > "{env_file}"\n'
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=run.trial,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # what it starts in the background stays in this group, stopped at the end
    )
    run.groups.append(proc.pid)
    try:
        output, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"the page's block timed out:\n{block.text}\n{output.decode(errors='replace')}")
    text = output.decode(errors="replace")
    if proc.returncode != 0:
        logs = "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted((run.trial / "logs").glob("*"))
        )
        pytest.fail(f"the page's block failed ({proc.returncode}):\n{block.text}\n{text}\n{logs}")
    return text


def _run_background(run: Run, block: Block, env: dict[str, str], env_file: Path) -> None:
    out = run.trial / f"background-{len(run.background)}.txt"
    script = f'. "{env_file}"\nexec {_substitute(block.text, run.ports).strip()}\n'
    with out.open("wb") as handle:
        proc = subprocess.Popen(
            ["bash", "-c", script],
            cwd=run.trial,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    run.groups.append(proc.pid)
    run.readers.append(proc)
    run.background.append(out)


def _subscribed(trial: Path) -> bool:
    return all("u'watcher'" in _log_of(trial, f"broker-{site}.log") for site in ("truck-7", "cloud"))


def _stop_groups(run: Run) -> None:
    """SIGTERM every process group the page started, then SIGKILL what is left after 30 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in run.groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + 30
        while sig == signal.SIGTERM and time.monotonic() < deadline:
            for reader in run.readers:
                reader.poll()  # reap the test's own children, so that they do not count as running
            if not any(_alive(g) for g in run.groups):
                break
            time.sleep(0.5)
    for reader in run.readers:
        reader.wait(timeout=30)


def _alive(pgid: int) -> bool:
    """Whether a process of the group is left."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def base_dir() -> Iterator[Path]:
    """Where the page runs: a directory the ``mosquitto`` user can reach, as the page asks when run as root."""
    base = Path(tempfile.mkdtemp(prefix="spanedge-deployment-"))
    base.chmod(0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def page_run(base_dir: Path) -> Iterator[Run]:
    """Run the whole page once; every test reads what it left."""
    _check_parts()
    from simulate.broker import free_port

    base = base_dir
    (base / "examples").symlink_to(ROOT / "examples")
    trial = base / "trial"
    trial.mkdir()
    run = Run(trial, {port: free_port() for port in PAGE_PORTS})
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPANEDGE_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", ""), "/usr/sbin"])
    env_file = base / "env.sh"
    blocks = page_blocks(PAGE.read_text())
    files = [b for b in blocks if b.lang == "yaml" and 'title="' in b.info]
    assert files, "the page shows no file to save"
    for b in files:
        name = b.info.split('title="', 1)[1].split('"', 1)[0]
        (trial / name).write_text(_substitute(b.text, run.ports))
    try:
        for block in blocks:
            if block.lang != "bash" or block.marker == "skip":
                continue
            if block.marker == "background":
                _run_background(run, block, env, env_file)
                continue
            if block.text.startswith("for i in $(seq"):
                wait_for(lambda: _subscribed(trial), 120, "the page's mosquitto_sub commands to connect", poll=0.5)
            if block.text.startswith("spanedge status"):
                # Results first: the page reads them before it asks for the status.
                for path, topic in zip(run.background, ("cold-chain/unit-stats", "cold-chain/alerts"), strict=True):
                    wait_for(
                        lambda p=path, t=topic: f"{t} {{" in p.read_text(errors="replace"),
                        600,
                        lambda t=topic: f"a result on {t} (hub log:\n{_log_of(trial, 'hub.log')[-3000:]})",
                        poll=1.0,
                    )
            if block.text.startswith("spanedge site revoke"):
                # the joined gateway's results first: the page revokes it once its alerts came out
                wait_for(
                    lambda p=run.background[1]: '"unit":"u3"' in p.read_text(errors="replace"),
                    600,
                    lambda: (
                        f"an alert of truck-12's unit (hub log:\n{_log_of(trial, 'hub.log')[-3000:]}\n"
                        f"truck-12's log:\n{_log_of(trial, 'truck-12.log')[-3000:]})"
                    ),
                    poll=1.0,
                )
            if '|| echo "refused"' in block.text:
                # the broker reloads its revocation list on the SIGHUP the revocation sent it: at once, or nearly
                wait_for(lambda b=block: "refused" in _run_foreground(run, b, env, env_file), 60, "the refusal")
            if block.text.startswith("kill $(cat run/truck-7.pid"):
                ca = ssl.create_default_context(cafile=str(trial / "state/hub/ca/ca.pem"))
                answer = httpx.get(f"https://127.0.0.1:{run.ports[8000]}/", timeout=30, verify=ca)
                run.dashboard = (answer.status_code, answer.text)
            run.outputs.append((block.text, _run_foreground(run, block, env, env_file)))
        yield run
    finally:
        _stop_groups(run)


def test_window_summaries_appear_on_the_trucks_own_broker(page_run: Run) -> None:
    lines = page_run.background[0].read_text().splitlines()
    summaries = [line for line in lines if line.startswith("cold-chain/unit-stats {")]
    assert summaries, lines
    first = json.loads(summaries[0].split(" ", 1)[1])
    assert first["unit"] == "u1"
    assert first["mean_c"] == pytest.approx(3.611)  # 38.5 F; a mean of n equal readings may differ in the last bit


def test_alerts_appear_on_the_hubs_broker(page_run: Run) -> None:
    lines = page_run.background[1].read_text().splitlines()
    alerts = [line for line in lines if line.startswith("cold-chain/alerts {")]
    assert alerts, lines
    # truck-7's unit stays in the safe band; truck-9's and, once it joined, truck-12's are too warm
    assert {json.loads(line.split(" ", 1)[1])["unit"] for line in alerts} == {"u2", "u3"}


def test_a_gateway_joins_while_the_app_runs_and_is_revoked(page_run: Run) -> None:
    joined = _log_of(page_run.trial, "truck-12.log")
    assert "site truck-12 enrolled" in joined
    assert "subscribed to trucks/12/+/temp" in joined
    revoked = page_run.block_output("spanedge site revoke truck-12")
    assert revoked.count("reloaded (SIGHUP)") == 3, revoked  # the three brokers, without a restart
    assert "refused" in page_run.block_output("mosquitto_pub -h localhost -p 8883")
    acl = (page_run.trial / "mqtt" / "acl").read_text()
    assert "user truck-12" not in acl
    assert "user watcher" in acl  # the hub's ACLs keep broker-config's observer


def test_deploy_status_and_rest_say_what_the_page_says(page_run: Run) -> None:
    deployed = page_run.block_output("spanedge deploy app.py")
    assert "unit_stats@truck-7" in deployed
    assert "anomaly" in deployed
    status = page_run.block_output("spanedge status")
    assert re.search(r"truck-7\s+spoke\s+yes", status), status
    assert re.search(r"truck-9\s+spoke\s+yes", status), status
    assert "app 'cold-chain'" in status
    placement = page_run.block_output("curl -s --cacert")
    assert '"app":"cold-chain"' in placement


def test_the_dashboard_is_where_the_page_says(page_run: Run) -> None:
    assert "The dashboard is at <https://127.0.0.1:8000/>" in PAGE.read_text()
    status, html = page_run.dashboard
    assert status == 200
    assert "<html" in html.lower()


def test_the_stop_block_stops_every_process(page_run: Run) -> None:
    for name in ("truck-7", "truck-9", "truck-12", "hub", "broker-cloud", "broker-truck-7", "broker-truck-9"):
        pid = int((page_run.trial / "run" / f"{name}.pid").read_text())
        wait_for(lambda p=pid: not Path(f"/proc/{p}").exists() or "zombie" in _state(p), 60, f"{name} to stop")
    assert "hub stopping" in _log_of(page_run.trial, "hub.log")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().lower()
    except OSError:
        return "zombie"


def test_the_page_blocks_are_found() -> None:
    blocks = page_blocks(PAGE.read_text())
    markers = [b.marker for b in blocks if b.lang == "bash"]
    assert markers.count("skip") == 1
    assert markers.count("background") == 2
    assert any(b.text.startswith("spanedge broker-config") for b in blocks)
