"""A staged rollout on the simulator: the cold chain's v2 reaches every spoke stage by stage, results exact throughout.

v2 computes the same Celsius values in other code (a changed record-level
function at the spokes, which mixes with v1), so the reference of v1 holds over
the whole run: 0 lost, 0 duplicated and 0 wrong results across the three stages.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from spanedge.loader import source_hash
from tests.e2e.conftest import COLD_CHAIN, MODE, _require_parts
from tests.e2e.test_cold_chain import _assert_exact

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

V1 = (COLD_CHAIN / "app.py").read_text()
V2 = V1.replace(
    """    return {
        "unit": str(raw["unit"]),
        "ts": float(raw["ts"]),
        "temp_c": round((float(raw["temp_f"]) - 32.0) * 5.0 / 9.0, 3),""",
    """    fahrenheit = float(raw["temp_f"])
    return {
        "unit": str(raw["unit"]),
        "ts": float(raw["ts"]),
        "temp_c": round((fahrenheit - 32.0) * 5.0 / 9.0, 3),""",
)
LABELS = {"truck-7": "truck", "truck-9": "truck", "warehouse-north": "warehouse"}


@pytest.fixture(scope="module")
def rollout_run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """70 s of sensor data; at 15 s v2 rolls out in stages kind=truck:1, kind=truck, * with 8 s holds."""
    from simulate.runner import Options, run

    _require_parts()
    assert V2 != V1
    directory = tmp_path_factory.mktemp("rollout")
    data = yaml.safe_load((COLD_CHAIN / "sites.yaml").read_text())
    for site, kind in LABELS.items():
        data["sites"][site]["labels"] = {"kind": kind}
    sites = directory / "sites.yaml"
    sites.write_text(yaml.safe_dump(data, sort_keys=False))
    v2 = directory / "app_v2.py"
    v2.write_text(V2)
    fault = f"deploy:{v2}|kind=truck:1, kind=truck, *|dead_letter_rate<0.01|8s@15s"
    opts = Options(
        sites=sites, app=COLD_CHAIN / "app.py", duration=70, faults=[fault], mode=MODE, run_dir=directory / "run"
    )
    return asyncio.run(run(opts))


def test_a_healthy_version_reaches_every_spoke_in_its_stages_with_exact_results(rollout_run: Any) -> None:
    if MODE != "managed":
        pytest.skip("a rollout is run by the managed hub")
    _assert_exact(rollout_run)
    rollout = json.loads((Path(rollout_run.run_dir) / "rollout.json").read_text())
    assert rollout["status"] == "passed", rollout["reason"]
    assert rollout["versions"][source_hash(V2)] == sorted(LABELS)
    assert [len(s["changes"]) for s in rollout["stages"]] == [1, 1, 1]
    assert rollout["stages"][2]["changes"] == ["warehouse-north"]
    passed = [s["stage"] for s in rollout["steps"] if s["status"] == "passed"]
    assert passed == [0, 1, 2]
    placement = json.loads((Path(rollout_run.run_dir) / "placement.json").read_text())
    assert any(h["reason"].startswith("rollout passed") for h in placement["history"])
