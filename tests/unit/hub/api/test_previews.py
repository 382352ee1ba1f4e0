"""Live previews at the hub: the summary's bounds, the store of the last ones, and the routes over a coordinator."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from hub.api.previews.limits import KEEP, MAX_BODY_BYTES, MAX_OPERATORS, MAX_REASON_CHARS
from hub.api.previews.models import PreviewReport, PreviewView
from hub.api.previews.store import PreviewStore
from tests.unit.hub.api.test_app import APP, AUTH, READ_TOKEN, client, coordinator, deploy, recorder  # noqa: F401

SHA = "ab" * 32


def report(**changes: Any) -> dict[str, Any]:
    """A valid summary, as ``spanedge preview`` sends it, with ``changes``."""
    counts = {"records_in": 6, "records_out": 5, "dead_letters": 1}
    body: dict[str, Any] = {
        "candidate_file": "app_v2.py",
        "candidate_sha256": SHA,
        "site": "truck-7",
        "duration_s": 60.0,
        "started_at": 1_700_000_000.0,
        "ended_at": 1_700_000_060.0,
        "records": 6,
        "live": {"version": "hub v1", "dead_letters": 1, "cpu_per_record_s": 0.0002},
        "candidate": {"version": "app_v2.py", "dead_letters": 1, "cpu_per_record_s": 0.0003},
        "operators": [
            {"name": "readings", "part": "edge", "live": counts, "candidate": counts},
            {"name": "to_celsius", "part": "edge", "live": counts, "candidate": None},
        ],
        "differing_results": 1,
        "stopped_early": False,
    }
    return body | changes


def view(n: int, app: str = "demo") -> dict[str, Any]:
    return {**PreviewReport.model_validate(report(records=n)).model_dump(mode="json"), "app": app, "received_at": n}


def test_a_summary_as_the_command_sends_it_is_taken() -> None:
    taken = PreviewReport.model_validate(report())
    assert taken.operators[1].candidate is None
    assert taken.stop_reason is None


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"operators": [report()["operators"][0]] * (MAX_OPERATORS + 1)}, "operators"),
        ({"stopped_early": True, "stop_reason": "x" * (MAX_REASON_CHARS + 1)}, "stop_reason"),
        ({"stop_reason": "interrupted (Ctrl-C)"}, "stop_reason is given but stopped_early is false"),
        ({"ended_at": 1_699_999_999.0}, "ended_at (1699999999.0) is before started_at"),
        ({"candidate_sha256": "AB" * 32}, "candidate_sha256"),
        ({"candidate_file": "app\nv2.py"}, "candidate_file"),
        ({"site": "Truck 7"}, "site"),
        ({"duration_s": 601.0}, "duration_s"),
        ({"records": -1}, "records"),
        ({"live": {"version": "hub v1", "dead_letters": 0, "cpu_per_record_s": float("nan")}}, "cpu_per_record_s"),
        ({"who": "me"}, "who"),
    ],
)
def test_a_summary_out_of_bounds_is_refused_naming_the_field(changes: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(problem)):
        PreviewReport.model_validate(report(**changes))


def test_the_store_keeps_the_newest_previews_per_app_on_disk(tmp_path: Path) -> None:
    store = PreviewStore(tmp_path, keep=3)
    for n in range(5):
        store.add("demo", view(n))
    store.add("other", view(9, "other"))
    assert [p["records"] for p in store.latest("demo")] == [4, 3, 2]  # newest first, the oldest dropped
    assert [p["records"] for p in store.latest("demo", 2)] == [4, 3]
    stored = json.loads((tmp_path / "demo.json").read_text())
    assert [p["records"] for p in stored["previews"]] == [2, 3, 4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.json", "other.json"]  # no temporary file left

    again = PreviewStore(tmp_path, keep=3, deployed={"demo"})
    assert again.latest("demo") == store.latest("demo")
    assert again.latest("other") == []
    assert not (tmp_path / "other.json").exists()  # the previews of an app gone while the hub was down
    again.drop("demo")
    assert again.latest("demo") == []
    assert not (tmp_path / "demo.json").exists()


def test_a_damaged_file_is_left_out_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "demo.json").write_text('{"app": "demo", "previews": [{"site": 7}]}')
    (tmp_path / "other.json").write_text(json.dumps({"app": "other", "previews": [view(1, "other")]}))
    with caplog.at_level(logging.WARNING, "hub.api.previews.store"):
        store = PreviewStore(tmp_path)
    assert store.latest("demo") == []
    assert [p["records"] for p in store.latest("other")] == [1]
    assert "left out the previews in" in caplog.text
    assert "demo.json" in caplog.text


def test_in_memory_without_a_state_directory() -> None:
    store = PreviewStore(None)
    store.add("demo", view(1))
    assert PreviewView.model_validate(store.latest("demo")[0]).records == 1


def test_the_routes_keep_a_deployed_apps_previews_and_drop_them_with_it(client: Any, tmp_path: Path) -> None:  # noqa: F811
    assert deploy(client).status_code == 201
    for n in range(KEEP + 2):
        answer = client.post("/apps/demo/previews", json=report(records=n), headers=AUTH)
        assert answer.status_code == 201, answer.text
    assert answer.json()["app"] == "demo"
    listed = client.get("/apps/demo/previews", headers={"Authorization": f"Bearer {READ_TOKEN}"}).json()
    assert (listed["app"], listed["keep"]) == ("demo", KEEP)
    assert [p["records"] for p in listed["previews"]] == list(range(KEEP + 1, 1, -1))
    assert (tmp_path / "previews" / "demo.json").exists()  # under the coordinator's state directory
    snapshot = client.get("/apps/demo/previews", headers=AUTH).json()["previews"][0]
    assert snapshot["operators"][0] == report()["operators"][0]

    assert client.delete("/apps/demo", headers=AUTH).status_code == 200
    assert not (tmp_path / "previews" / "demo.json").exists()
    deploy(client)
    assert client.get("/apps/demo/previews", headers=AUTH).json()["previews"] == []


def test_the_routes_refuse_what_they_do_not_keep(client: Any) -> None:  # noqa: F811
    read = {"Authorization": f"Bearer {READ_TOKEN}"}
    assert client.post("/apps/demo/previews", json=report(), headers=AUTH).status_code == 404
    deploy(client)
    assert client.post("/apps/demo/previews", json=report(), headers=read).status_code == 403
    assert client.post("/apps/Demo/previews", json=report(), headers=AUTH).status_code == 422
    refused = client.post("/apps/demo/previews", json=report(records="many"), headers=AUTH)
    assert (refused.status_code, refused.json()["error"]) == (422, "InvalidRequest")
    big = report(candidate_file="x" * 200, operators=[report()["operators"][0]] * 2000)
    too_large = client.post("/apps/demo/previews", json=big, headers=AUTH)
    assert too_large.status_code == 413
    assert (
        too_large.json()["detail"] == f"request body over {MAX_BODY_BYTES} bytes; a preview's summary must be smaller"
    )
    assert client.get("/apps/demo/previews", headers=AUTH).json()["previews"] == []


def test_the_smaller_limit_is_the_previews_alone(client: Any) -> None:  # noqa: F811
    padded = "# " + "x" * (MAX_BODY_BYTES + 1000) + "\n" + APP
    assert deploy(client, padded).status_code == 201  # an app's source keeps the 4 MiB limit
