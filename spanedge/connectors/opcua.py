"""OPC UA streams: the nodes a stream subscribes to, named, and the security of the connection."""

from __future__ import annotations

import enum
import re
from urllib.parse import parse_qs, urlsplit

from spanedge.file_models import FileModel

_NODE_ID = re.compile(r"(ns=\d+;)?(i=\d+|s=.+|g=[0-9A-Fa-f-]{36}|b=.+)")


class Mode(enum.StrEnum):
    """OPC UA message security modes."""

    NONE = "None"
    SIGN = "Sign"
    SIGN_AND_ENCRYPT = "SignAndEncrypt"


class Security(FileModel, frozen=True):
    """The certificate security of an OPC UA connection.

    Attributes:
        policy: the security policy, e.g. ``Basic256Sha256`` or ``Aes128Sha256RsaOaep``.
        mode: ``Sign`` or ``SignAndEncrypt``.
        cert_file: the client's certificate (DER or PEM), which the server must trust.
        key_file: the client's private key.
        server_cert_file: the server's certificate, to check it (``None``: taken from the server).
    """

    policy: str
    mode: Mode
    cert_file: str
    key_file: str
    server_cert_file: str | None = None

    def __post_init__(self) -> None:
        """Refuse mode ``None`` here: leave ``security:`` out for an unsecured connection."""
        if self.mode is Mode.NONE:
            msg = "mode: leave security: out for no security; here the mode is Sign or SignAndEncrypt"
            raise ValueError(msg)

    def asyncua_string(self) -> str:
        """The ``Policy,Mode,cert,key[,server cert]`` string of asyncua's ``Client.set_security_string``."""
        parts = [self.policy, self.mode.value, self.cert_file, self.key_file]
        if self.server_cert_file:
            parts.append(self.server_cert_file)
        return ",".join(parts)


def node_problem(node_id: str) -> str | None:
    """What is wrong with an OPC UA node id (``ns=2;i=7``, ``ns=3;s=Boiler.Temp``), or ``None``."""
    if _NODE_ID.fullmatch(node_id):
        return None
    return f"{node_id!r} is not a node id such as ns=2;i=7 or ns=3;s=Boiler.Temp"


def url_nodes(url: str) -> dict[str, str]:
    """The nodes given in the URL's ``?nodes=`` (comma-separated node ids, each named after itself)."""
    query = parse_qs(urlsplit(url).query)
    out: dict[str, str] = {}
    for value in query.get("nodes", []):
        for node in value.split(","):
            if node.strip():
                out[node.strip()] = node.strip()
    return out


def endpoint(url: str) -> str:
    """The ``opc.tcp://`` endpoint of an ``opcua://`` URL (its query left out)."""
    parts = urlsplit(url)
    return f"opc.tcp://{parts.netloc}{parts.path}"
