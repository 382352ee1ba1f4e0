"""App and site names: one documented pattern, a clear refusal otherwise, and file names that never collide."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from spanedge import App
from spanedge.errors import InvalidDataflow, InvalidName
from spanedge.names import (
    APP_NAME_PATTERN,
    MAX_NAME_LENGTH,
    NAME_PATTERN,
    RESERVED_APP_NAMES,
    RESERVED_SITE_NAMES,
    SITE_NAME_PATTERN,
    check_app_name,
    check_site_name,
    file_stem,
)

ROOT = Path(__file__).resolve().parents[3]
PROPERTIES = settings(database=None, max_examples=200, deadline=None)
valid_names = st.from_regex(re.compile(r"[a-z0-9][a-z0-9_-]{0,62}", re.ASCII), fullmatch=True)


@pytest.mark.parametrize("name", ["cold-chain", "smart_farm", "truck-7", "7eleven", "a", "x" * MAX_NAME_LENGTH])
def test_valid_names_pass_unchanged(name: str) -> None:
    assert check_app_name(name, "test") == name
    assert check_site_name(name, "test") == name
    assert file_stem(name) == name


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "is empty"),
        ("..", r"contains '\.' \(U\+002E\) at position 0"),
        (".hidden", r"contains '\.'"),
        ("app.py", r"contains '\.' \(U\+002E\) at position 3"),
        ("a/b", r"contains '/' \(U\+002F\) at position 1.*did you mean 'a-b'\?"),
        ("a\\b", r"contains '\\\\'"),
        ('q"uote', r"contains '\"'"),
        ("a b", r"contains ' '"),
        (" demo", r"contains ' ' \(U\+0020\) at position 0.*did you mean 'demo'"),
        ("demo\n", r"contains '\\n' \(U\+000A\)"),
        ("a+b", r"contains '\+'"),
        ("a#b", "contains '#'"),
        ("-rf", "starts with '-'"),
        ("_x", "starts with '_'"),
        ("Demo", r"has uppercase letters.*did you mean 'demo'"),
        ("x" * 300, r"'x{40}'\.\.\. \(300 characters\) has 300 characters, more than 63"),
        ("x" * 64, "has 64 characters, more than 63"),
        ("caf\u00e9", r"contains 'é' \(U\+00E9\) at position 3"),
        ("\u0430pp", r"contains 'а' \(U\+0430\) at position 0"),  # Cyrillic a
        ("ａpp", r"\(U\+FF41\)"),  # fullwidth a
        ("app\u200b", r"\(U\+200B\)"),  # zero-width space
        ("e\u0301", r"\(U\+0301\)"),  # combining accent
        ("\u212aelvin", r"\(U\+212A\)"),  # Kelvin sign, lower()s to k
        ("a\x00", r"\(U\+0000\)"),
    ],
)
def test_invalid_names_are_refused_with_the_reason(name: str, reason: str) -> None:
    with pytest.raises(InvalidName, match=reason):
        check_app_name(name, "POST /apps")
    with pytest.raises(InvalidName, match="site name"):
        check_site_name(name, "sites.yaml")
    with pytest.raises(InvalidName):
        file_stem(name)


def test_the_message_says_where_what_and_how() -> None:
    with pytest.raises(InvalidName) as info:
        check_app_name("My App", "POST /apps")
    message = str(info.value)
    assert message.startswith("POST /apps: app name 'My App' has uppercase letters")
    assert "1 to 63 lowercase letters, digits, '_' or '-', starting with a letter or digit" in message
    assert NAME_PATTERN in message
    assert message.endswith("did you mean 'my-app'?")


@pytest.mark.parametrize("value", [None, 7, b"demo", ["demo"]])
def test_names_that_are_not_strings(value: object) -> None:
    with pytest.raises(InvalidName, match=f"app name must be a string, got {type(value).__name__}"):
        check_app_name(value, "plan apps[0]")


def test_control_is_a_reserved_app_name_but_a_valid_site_name() -> None:
    assert "control" in RESERVED_APP_NAMES
    with pytest.raises(InvalidName, match="'control' is reserved"):
        check_app_name("control", "test")
    assert check_site_name("control", "test") == "control"


def test_the_patterns_are_one_documented_pattern() -> None:
    assert APP_NAME_PATTERN == SITE_NAME_PATTERN == NAME_PATTERN == "^[a-z0-9][a-z0-9_-]{0,62}$"


def test_invalid_name_is_an_invalid_dataflow_and_a_value_error() -> None:
    assert issubclass(InvalidName, InvalidDataflow)
    assert issubclass(InvalidName, ValueError)


def test_app_checks_its_name_and_says_where() -> None:
    with pytest.raises(InvalidDataflow, match=r"App\(\.\.\.\) at test_names\.py:\d+: app name 'a/b'"):
        App("a/b")
    assert App("cold-chain").name == "cold-chain"


def test_every_example_name_is_valid() -> None:
    for path in sorted((ROOT / "examples").glob("*/sites.yaml")):
        for site in yaml.safe_load(path.read_text())["sites"]:
            check_site_name(site, str(path))
    apps = re.findall(
        r"App\(\s*[\"']([^\"']*)[\"']", "".join(p.read_text() for p in (ROOT / "examples").glob("*/app.py"))
    )
    assert len(apps) == len(list((ROOT / "examples").glob("*/app.py")))
    for name in apps:
        check_app_name(name, "examples")


@PROPERTIES
@given(valid_names)
def test_every_name_of_the_pattern_is_accepted(name: str) -> None:
    assert re.fullmatch(NAME_PATTERN.strip("^$"), name)
    assert check_site_name(name, "test") == name
    assert file_stem(name) == name


@PROPERTIES
@given(valid_names, valid_names)
def test_distinct_names_have_distinct_stems_even_ignoring_case(a: str, b: str) -> None:
    if a != b:
        assert file_stem(a) != file_stem(b)
        assert file_stem(a).casefold() != file_stem(b).casefold()


@PROPERTIES
@given(valid_names)
def test_a_stem_is_a_safe_file_name(name: str) -> None:
    stem = file_stem(name)
    assert stem not in (".", "..")
    assert not stem.startswith(("-", "."))
    assert Path(stem).name == stem
    assert Path(stem).parts == (stem,)
    assert stem.isascii()
    assert stem.isprintable()


@PROPERTIES
@given(st.text(max_size=80))
def test_any_text_is_accepted_exactly_when_it_matches(name: str) -> None:
    if re.fullmatch(r"[a-z0-9][a-z0-9_-]{0,62}", name) is not None and name not in RESERVED_SITE_NAMES:
        assert check_site_name(name, "test") == name
    else:
        with pytest.raises(InvalidName, match="site name"):
            check_site_name(name, "test")
