"""Without the ``placement`` extra the solver is missing: the error names the command that installs it.

The light core (``pip install spanedge``) has no solver and no numpy. These tests hide
one of those modules from the import system, as on a gateway, and check what a user sees.
The light install itself is exercised for real in ``tests/integration/test_light_install.py``.
"""

from __future__ import annotations

import importlib
import re
import sys
import tomllib

import pytest
from click.testing import CliRunner

import placement
from spanedge.cli import cli
from spanedge.errors import MissingExtra, SpanEdgeError
from tests.conftest import EXAMPLES, ROOT

SOLVER_MODULES = ("highspy", "networkx", "numpy", "pulp")
FIX = "pip install 'spanedge[placement]'"


def hide(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """Make ``import module`` fail as if it were not installed, and forget the placement package."""
    assert placement.solve is not None  # the whole package is loaded, so every submodule below is restored
    for name in [m for m in sys.modules if m == "placement" or m.startswith("placement.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)


@pytest.mark.parametrize("module", SOLVER_MODULES)
def test_importing_placement_without_the_extra_names_the_command(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    hide(monkeypatch, module)
    with pytest.raises(MissingExtra) as caught:
        importlib.import_module("placement")
    assert caught.value.module == module
    assert caught.value.extra == "placement"
    assert FIX in str(caught.value)
    assert isinstance(caught.value, SpanEdgeError)
    assert isinstance(caught.value, ImportError)  # code that guards with `except ImportError` still works


def test_deploy_dry_run_without_the_extra_prints_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    hide(monkeypatch, "pulp")
    app = str(EXAMPLES / "cold_chain" / "app.py")
    sites = str(EXAMPLES / "cold_chain" / "sites.yaml")
    result = CliRunner().invoke(cli, ["deploy", app, "--sites", sites, "--dry-run"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert result.output.count("\n") == 1
    assert result.output.startswith("error: pulp is not installed")
    assert FIX in result.output


def requirement_names(requirements: list[str]) -> set[str]:
    """The distribution names of PEP 508 requirement strings, lower case, without extras or versions."""
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_light_core_depends_on_no_solver_engine_or_web_framework() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = requirement_names(project["dependencies"])
    heavy = {"pulp", "highspy", "numpy", "aiomqtt", "amqtt", "pyspark", "pyarrow", "pandas", "fastapi", "uvicorn"}
    assert core.isdisjoint(heavy), core & heavy
    assert {"paho-mqtt", "psutil", "click"} <= core  # the agent's MQTT client, its heartbeat, its command
    # the command line is plain click: no typer, and none of what rich brings (13.5 MiB) on a gateway
    assert core.isdisjoint({"typer", "rich", "pygments", "markdown-it-py", "mdurl", "shellingham"}), core
    # sites.yaml is read with msgspec and the DAG is walked with graphlib: no pydantic or networkx on a gateway
    assert core.isdisjoint({"pydantic", "networkx"}), core
    extras = project["optional-dependencies"]
    sim = requirement_names(extras["sim"]) | requirement_names(extras["placement"])
    assert "rich" in sim, "spanedge simulate prints with rich"
    assert requirement_names(extras["placement"]) == {"pulp", "highspy", "networkx", "numpy", "rich"}
    assert "pydantic" in requirement_names(extras["hub"]), "the REST API's models"
    for extra in ("hub", "sim"):
        assert "spanedge[placement]" in extras[extra], f"the {extra} extra runs the planner"
    assert "aiomqtt" in requirement_names(extras["sim"])
    assert set(re.findall(r"\w+", extras["all"][0].partition("[")[2])) >= {"placement", "hub", "sim"}
