"""The hub's instance id and its MQTT client ids, on new and on existing state directories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hub.control.identity import IDENTITY_FILE, HubIdentity
from spanedge.errors import SpanEdgeError


def test_a_new_state_dir_gets_an_instance_id_that_stays(tmp_path: Path) -> None:
    first = HubIdentity.of(tmp_path / "hub")
    assert len(first.instance) == 8
    assert not first.legacy_ingest
    assert HubIdentity.of(tmp_path / "hub") == first
    assert first.client_id("cloud", "ingest") == f"spanedge-hub-cloud-{first.instance}-ingest"
    assert first.client_id("cloud", "control") == f"spanedge-hub-cloud-{first.instance}-control"


def test_the_empty_apps_folder_a_new_hub_makes_is_no_data(tmp_path: Path) -> None:
    (tmp_path / "apps").mkdir()
    assert not HubIdentity.of(tmp_path).legacy_ingest


def test_two_state_dirs_get_two_instance_ids(tmp_path: Path) -> None:
    assert HubIdentity.of(tmp_path / "a").instance != HubIdentity.of(tmp_path / "b").instance


@pytest.mark.parametrize("data", ["apps/cold-chain.json", "ingest", "checkpoints", "distribution.json"])
def test_a_state_dir_with_data_from_before_instance_ids_keeps_the_old_ingest_id(tmp_path: Path, data: str) -> None:
    (tmp_path / "hub" / data).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "hub" / data).write_text("{}")
    identity = HubIdentity.of(tmp_path / "hub")
    assert identity.legacy_ingest
    assert json.loads((tmp_path / "hub" / IDENTITY_FILE).read_text())["legacy_ingest"] is True
    # its broker may hold records queued for the old persistent session: the ingest resumes it
    assert identity.client_id("cloud", "ingest") == "spanedge-hub-ingest-cloud"
    assert identity.client_id("cloud", "control") == f"spanedge-hub-cloud-{identity.instance}-control"
    assert HubIdentity.of(tmp_path / "hub") == identity


def test_a_damaged_identity_file_is_named(tmp_path: Path) -> None:
    (tmp_path / IDENTITY_FILE).write_text("{")
    with pytest.raises(SpanEdgeError, match=rf"cannot read the hub's instance id from .*{IDENTITY_FILE}"):
        HubIdentity.of(tmp_path)
