"""The processes of a simulated topology: their commands, and a stand-in hub reached through the hub's client."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulate.cluster import Cluster, agent_argv, hub_argv
from simulate.config import parse_simulation
from simulate.errors import SimulationError
from simulate.topology import Topology
from spanedge.errors import SpanEdgeError
from spanedge.sites import load_sites
from tests.conftest import EXAMPLES, missing_part

pytestmark = pytest.mark.timeout(60)

#: A hub that answers the routes the simulator uses over HTTPS, with the token of its environment and a certificate
#: of the CA it makes in its state directory, as ``spanedge hub`` does.
STUB_HUB = """
import json, os, ssl, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from hub.api.tls import issued_tls

port = int(sys.argv[sys.argv.index("--port") + 1])
tls = issued_tls(Path(sys.argv[sys.argv.index("--state-dir") + 1]), "127.0.0.1")

class Hub(BaseHTTPRequestHandler):
    def _answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorised(self):
        if self.headers.get("Authorization") == "Bearer " + os.environ["SPANEDGE_TOKEN"]:
            return True
        self._answer(401, {"error": "Unauthorized", "detail": "bad token"})
        return False

    def do_GET(self):
        if self.path == "/healthz":
            self._answer(200, {"status": "ok"})
        elif self._authorised():
            self._answer(200, {"plan": {"version": 2}, "history": [{"version": 1}, {"version": 2, "changed": True}]})

    def do_POST(self):
        if not self._authorised():
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if "broken" in body["source"]:
            self._answer(422, {"error": "InvalidDataflow", "detail": "the app is broken"})
        else:
            self._answer(200, {"plan": {"app": "demo"}, "filename": body["filename"]})

    def log_message(self, *args):
        pass

server = HTTPServer(("127.0.0.1", port), Hub)
context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
context.load_cert_chain(tls.cert_file, tls.key_file)
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"""


def test_hub_and_agent_commands() -> None:
    managed = hub_argv("managed", Path("s.yaml"), Path("state"), hub_site="cloud", spark_master="local[1]", port=8123)
    assert managed[managed.index("hub") :] == [
        "hub", "--sites", "s.yaml", "--state-dir", "state", "--port", "8123",
        "--spark-master", "local[1]", "--hub-site", "cloud", "--min-replan-interval", "10",
        "--site-grace", "20.0", "--overload-for", "10.0", "--overload-recover", "20.0",
    ]  # fmt: skip
    standalone = hub_argv(
        "standalone",
        Path("s.yaml"),
        Path("state"),
        hub_site="cloud",
        spark_master="local[1]",
        app_file=Path("app.py"),
        plan_file=Path("plan.json"),
        hub_command=["my-hub"],
    )
    assert standalone == [
        "my-hub", "--sites", "s.yaml", "--state-dir", "state", "--app", "app.py", "--plan", "plan.json",
        "--spark-master", "local[1]",
    ]  # fmt: skip
    with pytest.raises(SimulationError, match="with an app and a plan file"):
        hub_argv("standalone", Path("s.yaml"), Path("state"), hub_site="cloud", spark_master="local[1]")
    agent = agent_argv("truck-7", Path("t7.yaml"), Path("a"), 2.0, Path("plan.json"))
    assert agent[agent.index("agent") :] == [
        "agent", "--site", "truck-7", "--sites", "t7.yaml", "--state-dir", "a",
        "--heartbeat-interval", "2.0", "--peer-probe-interval", "10.0", "--plan", "plan.json",
    ]  # fmt: skip


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    sites = load_sites(EXAMPLES / "cold_chain" / "sites.yaml")
    try:
        topology = Topology(sites, parse_simulation(sites), tmp_path)
    except SpanEdgeError as exc:
        missing_part(f"needs a broker: {exc}")
    topology.files = {name: tmp_path / f"{name}.yaml" for name in sites.sites}  # nothing is started
    cluster = Cluster(topology, tmp_path, "cloud", [s.name for s in sites.spokes])
    yield cluster
    for child in cluster.children():
        child.stop(timeout=5)


async def test_a_hub_is_awaited_deployed_to_and_asked_for_its_placement(cluster: Cluster, tmp_path: Path) -> None:
    stub = tmp_path / "stub_hub.py"
    stub.write_text(STUB_HUB)
    cluster.start_hub("managed", "local[1]", tmp_path / "app.py", hub_command=[sys.executable, str(stub)])
    await cluster.wait_hub(timeout=30)
    assert cluster.client is not None
    assert cluster.client.url.startswith("https://127.0.0.1:")
    assert cluster.hub_ca == tmp_path / "hub" / "ca" / "ca.pem"
    app = tmp_path / "app.py"
    app.write_text("app = 1\n")
    answer = await cluster.deploy(app)
    assert answer == {"plan": {"app": "demo"}, "filename": "app.py"}
    assert (tmp_path / "deploy.json").exists()
    placement = await cluster.placement("demo")
    assert placement is not None
    assert placement["plan"] == {"version": 2}
    assert (tmp_path / "placement.json").exists()
    app.write_text("broken\n")
    with pytest.raises(SimulationError, match="the hub refused the app: the app is broken"):
        await cluster.deploy(app)
    assert cluster.stopped() == []


async def test_a_hub_that_exits_is_reported_with_its_log(cluster: Cluster, tmp_path: Path) -> None:
    code = "import sys; print('no Java here'); sys.exit(3)"
    cluster.start_hub("managed", "local[1]", tmp_path / "app.py", hub_command=[sys.executable, "-c", code])
    with pytest.raises(SimulationError, match=r"hub exited with code 3; last lines of .*hub.log:\n(.|\n)*no Java here"):
        await cluster.wait_hub(timeout=30)
    assert cluster.stopped() == [f"hub is not running at the end; see {cluster.logs / 'hub.log'}"]
    assert await cluster.placement("demo") is None  # the hub is gone: no placement
