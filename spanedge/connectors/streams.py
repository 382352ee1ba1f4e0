"""The ``options:`` of the built-in HTTP push and file tail streams, checked with ``sites.yaml``.

An ``http://`` stream is an endpoint the agent serves (``http://0.0.0.0:8480/ingest/weather``:
listen on all addresses, port 8480, take ``POST /ingest/weather``); a ``file:///`` stream is a
file the agent follows. Both carry JSON records as an MQTT stream does.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec

from spanedge.file_models import FileModel

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class PushOptions(FileModel, frozen=True, kw_only=True):
    """Settings of an ``http://`` push endpoint.

    Attributes:
        token_env: the environment variable holding the bearer token clients must send
            (``Authorization: Bearer <token>``).
        max_body_bytes: the largest request body taken; a larger one is answered 413, unread.
        max_records: the most records one request may carry (413 past that).
        read_timeout_s: seconds a client has to send a whole request (408 after that).
        commit_timeout_s: seconds a request waits for its records to be committed (503 after that,
            and the client sends them again).
        max_connections: clients served at once; more wait for a free slot.
        cert_file: for ``https://``: the endpoint's certificate chain (PEM).
        key_file: for ``https://``: its private key.
    """

    token_env: str
    max_body_bytes: Annotated[int, msgspec.Meta(ge=1, le=64 * 2**20)] = 2**20
    max_records: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 10_000
    read_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=600)] = 10.0
    commit_timeout_s: Annotated[float, msgspec.Meta(gt=0, le=600)] = 30.0
    max_connections: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 64
    cert_file: str | None = None
    key_file: str | None = None

    def __post_init__(self) -> None:
        """Check that ``token_env`` names an environment variable."""
        if not _ENV_NAME.fullmatch(self.token_env):
            msg = f"token_env: {self.token_env!r} is not the name of an environment variable, such as PUSH_TOKEN"
            raise ValueError(msg)


class TailOptions(FileModel, frozen=True, kw_only=True):
    """Settings of a ``file:///`` stream.

    Attributes:
        offset_file: where the agent keeps how far the file is committed (default: the file's own
            path with ``.offset`` appended; the agent must be able to write there).
        poll_s: seconds between looks at the file once it has been read to its end.
        start: where to begin when no offset is saved: ``beginning`` or ``end`` of the file.
    """

    offset_file: str | None = None
    poll_s: Annotated[float, msgspec.Meta(ge=0.01, le=60)] = 0.2
    start: Annotated[str, msgspec.Meta(pattern="^(beginning|end)$")] = "beginning"


def stream_options(scheme: str, options: dict[str, Any]) -> PushOptions | TailOptions | None:
    """The checked ``options:`` of a built-in ``http``/``https``/``file`` stream (``None`` for other schemes).

    Raises:
        ValueError: an option is unknown or out of range, or a required one is missing.
    """
    model: type[PushOptions | TailOptions]
    if scheme in ("http", "https"):
        model = PushOptions
    elif scheme == "file":
        model = TailOptions
    else:
        return None
    try:
        found = msgspec.convert(options, model)
    except (msgspec.ValidationError, ValueError) as exc:
        hint = "options: {token_env: PUSH_TOKEN}" if model is PushOptions else "options: {poll_s: 0.2}"
        msg = f"options: {exc} (e.g. {hint})"
        raise ValueError(msg) from None
    if isinstance(found, PushOptions) and (scheme == "https") != bool(found.cert_file and found.key_file):
        msg = "options: an https:// endpoint needs cert_file and key_file, and an http:// one takes neither"
        raise ValueError(msg)
    return found
