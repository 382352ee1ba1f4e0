"""The hub's lock on its state directory: one holder, named to the next, gone with its process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hub.control.state_lock import LOCK_FILE, StateDirLock, StateDirLocked
from tests.conftest import ROOT

HOLD = """
import sys
from pathlib import Path
from hub.control.state_lock import StateDirLock
lock = StateDirLock(Path(sys.argv[1]), "abcdef01").acquire()
print("held", flush=True)
sys.stdin.read()
"""


def test_a_second_lock_on_the_same_state_dir_names_the_holder(tmp_path: Path) -> None:
    first = StateDirLock(tmp_path / "hub", "3f9c2a1b").acquire()
    try:
        holder = json.loads((tmp_path / "hub" / LOCK_FILE).read_text())
        assert (holder["host"], holder["pid"], holder["instance"]) == (socket.gethostname(), os.getpid(), "3f9c2a1b")
        with pytest.raises(StateDirLocked) as refused:
            StateDirLock(tmp_path / "hub", "00000000").acquire()
        message = str(refused.value)
        assert f"the state directory {(tmp_path / 'hub').resolve()} is in use by another hub" in message
        assert f"pid {os.getpid()} on host {socket.gethostname()}, instance 3f9c2a1b, since " in message
        assert "stop that hub first, or give this one its own --state-dir" in message
    finally:
        first.release()
    assert not first.held
    again = StateDirLock(tmp_path / "hub", "00000000").acquire()
    assert again.held
    again.release()


def test_the_lock_of_a_killed_process_is_free_again(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"held\n"
        with pytest.raises(StateDirLocked, match=f"pid {holder.pid} on host .*, instance abcdef01"):
            StateDirLock(tmp_path, "3f9c2a1b").acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    lock = StateDirLock(tmp_path, "3f9c2a1b").acquire()
    assert json.loads((tmp_path / LOCK_FILE).read_text())["instance"] == "3f9c2a1b"
    lock.release()


def test_a_state_dir_that_cannot_be_created_says_so(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(Exception, match=r"cannot open the hub's lock file .*; give the hub a writable --state-dir"):
        StateDirLock(tmp_path / "file" / "hub", "3f9c2a1b").acquire()
