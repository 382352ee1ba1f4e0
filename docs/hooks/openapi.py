"""MkDocs hook: write the hub's OpenAPI schema to ``build/openapi.json`` before the pages are read.

``docs/reference/rest.md`` renders that file with neoteroi-mkdocs (``[OAD(build/openapi.json)]``). The schema
comes from the hub's own FastAPI app, built over an empty control plane, so the page documents exactly the
routes, models and errors the hub serves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "build" / "openapi.json"

_SITES = """
sites:
  cloud: {tier: hub, broker: "mqtt://localhost:1883"}
  edge: {tier: spoke, broker: "mqtt://localhost:1883", streams: {readings: {topic: "sensors/+", rate: 1}}}
"""


def openapi_schema() -> dict[str, Any]:
    """The OpenAPI schema of the hub's REST API."""
    import tempfile

    from hub.api.app import create_app
    from hub.control.brokers import BrokerFiles
    from hub.control.coordinator import Coordinator
    from hub.control.enrolment import Enrolment
    from hub.control.fleet import Fleet
    from hub.control.join_tokens import JoinTokens
    from hub.control.registry import SiteRegistry
    from spanedge.ca import CertificateAuthority
    from spanedge.signing import PlanSigningKey
    from spanedge.sites import parse_sites
    from spanedge.tokens import Tokens, TokenScope

    sites = parse_sites(_SITES)
    coordinator = Coordinator(SiteRegistry(sites))
    tokens = Tokens([(TokenScope.ADMIN, "docs-build-token-0123456789abcdef0123456789", "the docs build")])
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        enrolment = Enrolment(
            Fleet(sites, state / "fleet.json"),
            JoinTokens(state / "join-tokens.json"),
            CertificateAuthority.open(state / "ca"),
            BrokerFiles(None),
            coordinator,
            PlanSigningKey.generate().public_key,
            default_broker="mqtt://localhost:1883",
        )
        schema: dict[str, Any] = create_app(coordinator, tokens, enrolment=enrolment).openapi()
    return schema


def on_config(config: Any) -> Any:
    """Write the schema before MkDocs reads the pages."""
    SCHEMA.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA.write_text(json.dumps(openapi_schema(), indent=2) + "\n")
    return config
