"""Loading an app: every way a user's app file can be wrong is one line naming the file, never a traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from spanedge.errors import InvalidDataflow
from spanedge.loader import load_app, load_app_source, read_app_source

APP = "from spanedge import App\napp = App('x')\n"


def test_a_directory_is_named_as_one(tmp_path: Path) -> None:
    with pytest.raises(
        InvalidDataflow, match=rf"^app file {re.escape(str(tmp_path))} is a directory; pass the app's .py file$"
    ):
        load_app(tmp_path)


def test_a_missing_file_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(InvalidDataflow, match="does not exist"):
        load_app(tmp_path / "nowhere.py")


def test_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "app.py"
    path.write_bytes(b"# caf\xe9\n" + APP.encode())
    with pytest.raises(InvalidDataflow, match=r"app\.py is not UTF-8 text \(byte 5: invalid continuation byte\)"):
        read_app_source(path)


def test_a_utf8_file_loads(tmp_path: Path) -> None:
    path = tmp_path / "app.py"
    path.write_text("# café\n" + APP, encoding="utf-8")
    assert load_app(path).name == "x"


def test_null_bytes_are_not_python_source() -> None:
    with pytest.raises(InvalidDataflow, match=r"^app\.py: .*null bytes"):
        load_app_source("x = 1\x00\n", "app.py")


def test_an_empty_file_defines_no_app() -> None:
    with pytest.raises(InvalidDataflow, match=r"must define exactly one App \(found: none\); create one"):
        load_app_source("", "app.py")


def test_several_apps_are_told_apart_by_name() -> None:
    with pytest.raises(InvalidDataflow, match=r"found: a, b\); pick one with --app-name"):
        load_app_source("from spanedge import App\na = App('a')\nb = App('b')\n", "app.py")


@pytest.mark.parametrize(
    ("call", "cause"),
    [("sys.exit(3)", "exit code 3"), ("sys.exit()", "exit code 0"), ("sys.exit('no config')", "no config")],
)
def test_sys_exit_at_import_reads_like_any_other_failure(call: str, cause: str) -> None:
    with pytest.raises(InvalidDataflow) as info:
        load_app_source(f"import sys\n\n{call}\n", "app.py")
    message = str(info.value)
    assert message.startswith(f"app.py:3: the app raised SystemExit while loading: {cause}; "), message
    assert "if __name__ == '__main__'" in message
    assert "\n" not in message


def test_sys_exit_in_a_function_names_the_first_and_last_frame() -> None:
    source = "import sys\n\ndef main():\n    sys.exit(1)\n\nmain()\n"
    with pytest.raises(InvalidDataflow, match=r"^app\.py:6: the app raised SystemExit .*\(in main at app\.py:4\)"):
        load_app_source(source, "app.py")


def test_ctrl_c_while_loading_is_not_swallowed() -> None:
    with pytest.raises(KeyboardInterrupt):
        load_app_source("raise KeyboardInterrupt\n", "app.py")


def test_a_module_level_error_is_one_line_even_with_a_multi_line_message() -> None:
    with pytest.raises(InvalidDataflow) as info:
        load_app_source("raise RuntimeError('first\\nsecond')\n", "app.py")
    assert str(info.value) == "app.py:1: the app raised RuntimeError while loading: first second"


def test_an_error_without_a_message_has_no_dangling_colon() -> None:
    with pytest.raises(InvalidDataflow) as info:
        load_app_source("raise RuntimeError\n", "app.py")
    assert str(info.value) == "app.py:1: the app raised RuntimeError while loading"


def test_a_source_that_fails_to_load_leaves_no_module_behind() -> None:
    import sys

    before = set(sys.modules)
    for source, filename in [("raise SystemExit(3)", "exits.py"), ("x = (", "broken.py"), ("y = 1", "no_app.py")]:
        with pytest.raises(InvalidDataflow):
            load_app_source(source, filename)
    assert set(sys.modules) == before
    app = load_app_source(APP + "# kept\n", "ok.py")
    (kept,) = set(sys.modules) - before  # the module of an app that loaded stays, for its dataclasses
    assert sys.modules[kept].__file__ == "ok.py"
    assert app.name
