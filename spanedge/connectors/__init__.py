"""Connector streams and sinks in the core: URL schemes and the settings of the built-in connectors.

A stream that ``sites.yaml`` binds with ``url:`` instead of ``topic:`` is read by a connector of
the edge agent (:mod:`edge_agent.connectors`), chosen by the URL's scheme. The models here hold
no client library: the light core checks a ``sites.yaml`` without ``spanedge[opcua]`` or
``spanedge[modbus]``, and the agent needs the extra only where it reads such a stream.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

#: The schemes whose connector needs a library, each also the name of its extra (``pip install 'spanedge[opcua]'``).
EXTRAS = frozenset({"opcua", "modbus"})
#: The schemes with a connector in the agent (``http`` and ``https``: a push endpoint as a source, a webhook as
#: a sink; ``file``: a followed file); other schemes need a connector the user registers.
BUILT_IN = EXTRAS | {"http", "https", "file"}
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")


def scheme_of(url: str) -> str:
    """The scheme of a connector URL (``opcua://plc:4840`` gives ``opcua``).

    Raises:
        ValueError: ``url`` has no ``scheme://host`` part (``file:///path`` for a file), or is an MQTT URL
            (a stream's ``topic:`` says that).
    """
    parts = urlsplit(url)
    if parts.scheme == "file":
        if not url.startswith("file:///") or len(parts.path) < 2:
            msg = f"url: {url!r} is not a file URL: give the file's absolute path after file://, e.g. file:///var/log/x.jsonl"
            raise ValueError(msg)
        return "file"
    if not _SCHEME.fullmatch(parts.scheme) or "://" not in url or not parts.hostname:
        msg = (
            f"url: {url!r} is not a connector URL such as opcua://plc-1:4840, modbus://10.0.0.7:502, "
            "http://0.0.0.0:8480/ingest or file:///var/log/scale.jsonl"
        )
        raise ValueError(msg)
    if parts.scheme in ("mqtt", "mqtts"):
        msg = "url: an MQTT stream is read from its site's broker: give its topic filter with topic:, not url:"
        raise ValueError(msg)
    if parts.password:
        msg = "url: do not put a password in the URL; name an environment variable with password_env:"
        raise ValueError(msg)
    return parts.scheme
