"""The agent's model intake: signed versions verified, kept privately, installed; bad ones refused with the reason."""

from __future__ import annotations

import base64
import logging
import stat
from pathlib import Path

import orjson
import pytest

from edge_agent.models.intake import ModelIntake
from edge_agent.models.store import ModelStore
from spanedge.models.envelope import model_topic, seal_model
from spanedge.models.installed import InstalledModels
from tests.keys import KEY, ROGUE, TRUSTED
from tests.models import make_version

TOPIC = model_topic("truck-7", "plant", "wear")


def _intake(tmp_path: Path) -> ModelIntake:
    return ModelIntake("truck-7", TRUSTED, ModelStore(tmp_path / "models"), InstalledModels())


def _held(intake: ModelIntake) -> int:
    return intake.installed.held("plant", "wear")


def test_a_signed_version_is_installed_from_its_switch_and_kept_privately(tmp_path: Path) -> None:
    intake = _intake(tmp_path)
    assert intake.handles(TOPIC)
    assert not intake.handles(model_topic("truck-9", "plant", "wear"))
    v1 = intake.receive(TOPIC, seal_model(make_version(number=1, switch_at=0.0), KEY))
    assert v1 is not None
    intake.receive(TOPIC, seal_model(make_version(number=2, bias=1.0, switch_at=100.0), KEY))
    assert intake.held() == {"plant": {"wear": 2}}
    assert intake.installed.pick("plant", "wear", 99.0).version == 1  # type: ignore[union-attr]
    assert intake.installed.pick("plant", "wear", 100.0).version == 2  # type: ignore[union-attr]
    kept = tmp_path / "models" / "plant" / "wear" / "v2.signed"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700


def _tampered() -> bytes:
    outer = orjson.loads(seal_model(make_version(number=3), KEY))
    outer["payload"] = outer["payload"].replace('"intercept":0.0', '"intercept":9.0')
    return orjson.dumps(outer)


def _resigned_garbage() -> bytes:
    outer = orjson.loads(seal_model(make_version(number=3), KEY))
    outer["sig"] = base64.b64encode(b"\x00" * 64).decode()
    return orjson.dumps(outer)


@pytest.mark.parametrize(
    ("message", "topic", "reason"),
    [
        (b'{"v": 1}', TOPIC, "is not a signed envelope"),
        (orjson.dumps(orjson.loads(seal_model(make_version(number=3), KEY)) | {"sig": ""}), TOPIC, "does not verify"),
        (seal_model(make_version(number=3), ROGUE), TOPIC, "are trusted; refusing it"),
        (_tampered(), TOPIC, "it was altered or forged"),
        (_resigned_garbage(), TOPIC, "it was altered or forged"),
        (seal_model(make_version(number=1, bias=5.0), KEY), TOPIC, "version 1 is not newer than version 2"),
        (seal_model(make_version(app="other", number=3), KEY), TOPIC, "holds model 'wear' of app 'other'"),
        (seal_model(make_version(model="heat", number=3), KEY), TOPIC, "holds model 'heat' of app 'plant'"),
    ],
    ids=["unsigned", "no-signature", "untrusted-key", "tampered", "bad-signature", "older", "other-app", "other-model"],
)
def test_a_bad_version_is_refused_with_the_reason_and_the_held_ones_stay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, message: bytes, topic: str, reason: str
) -> None:
    intake = _intake(tmp_path)
    intake.receive(TOPIC, seal_model(make_version(number=2, switch_at=0.0), KEY))
    caplog.set_level(logging.WARNING)
    assert intake.receive(topic, message) is None
    assert reason in caplog.text
    assert "refused model message on spanedge/v1/control/truck-7/model/plant/wear" in caplog.text
    assert intake.refused == 1
    assert _held(intake) == 2
    assert sorted(p.name for p in (tmp_path / "models" / "plant" / "wear").iterdir()) == ["v2.signed"]


def test_the_retained_copy_delivered_again_is_no_refusal(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    intake = _intake(tmp_path)
    message = seal_model(make_version(number=1), KEY)
    assert intake.receive(TOPIC, message) is not None
    caplog.set_level(logging.INFO)
    assert intake.receive(TOPIC, message) is None
    assert intake.refused == 0
    assert "delivered the version held again" in caplog.text


def test_a_restarted_agent_installs_the_kept_versions_verified_again(tmp_path: Path) -> None:
    first = _intake(tmp_path)
    for number in range(1, 6):
        first.receive(TOPIC, seal_model(make_version(number=number, switch_at=10.0 * number), KEY))
    folder = tmp_path / "models" / "plant" / "wear"
    assert sorted(p.name for p in folder.iterdir()) == ["v3.signed", "v4.signed", "v5.signed"]
    (folder / "v3.signed").write_bytes(_tampered())  # altered on disk: not used again
    again = _intake(tmp_path)
    assert again.restore() == 2
    assert again.installed.installed() == {("plant", "wear"): [(40.0, 4), (50.0, 5)]}
    assert again.receive(TOPIC, seal_model(make_version(number=5), KEY)) is None  # not newer than the kept one


def test_the_store_refuses_names_that_would_leave_its_folder(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not an app or model name"):
        ModelStore(tmp_path).save("../x", "wear", 1, b"{}")
