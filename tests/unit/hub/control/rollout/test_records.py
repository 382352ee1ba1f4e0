"""Rollout records in files, or as one document of a shared store: copied in once, a bad one named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hub.control.rollout.records import RolloutStore
from spanedge.errors import SpanEdgeError
from tests.unit.hub.control.rollout.test_runner import V1, V2, Fleet


class Documents:
    """Named JSON documents in a dict, as the shared database keeps them."""

    def __init__(self) -> None:
        self.kept: dict[str, Any] = {}

    def load_document(self, name: str) -> Any:
        return self.kept.get(name)

    def save_document(self, name: str, body: Any) -> None:
        self.kept[name] = body


def _record(tmp_path: Path) -> Any:
    fleet = Fleet(tmp_path)
    fleet.coordinator.deploy(V1, "app.py")
    fleet.deliver()
    return fleet.coordinator.rollouts.deploy(V2, "app_v2.py", stages="kind=truck:1, *", hold_s=30)


def test_the_files_a_hub_kept_without_ha_are_copied_into_the_document_once(tmp_path: Path) -> None:
    record = _record(tmp_path)
    files = RolloutStore(tmp_path)
    assert [r.rollout.app for r in files.load()] == ["demo"]
    documents = Documents()
    shared = RolloutStore(tmp_path, documents)
    assert [r.rollout.app for r in shared.load()] == ["demo"]
    assert set(documents.kept[RolloutStore.DOCUMENT]) == {"demo"}
    shared.delete("demo")
    assert documents.kept[RolloutStore.DOCUMENT] == {}
    shared.save(record)
    assert RolloutStore(tmp_path / "elsewhere", documents).load()[0].rollout == record.rollout


def test_a_bad_record_in_the_document_names_the_app_and_how_to_go_on(tmp_path: Path) -> None:
    documents = Documents()
    documents.kept[RolloutStore.DOCUMENT] = {"demo": {"rollout": "not one"}}
    with pytest.raises(
        SpanEdgeError, match="cannot read the rollout of app 'demo' in the hub's database .* delete that"
    ):
        RolloutStore(tmp_path, documents).load()
