"""The bounds of a preview's summary at the hub, shared with ``spanedge preview`` (standard library only)."""

from __future__ import annotations

#: The previews the hub keeps per app (the newest).
KEEP = 20
#: The most operators a summary lists; ``spanedge preview`` sends the first ones and counts the others.
MAX_OPERATORS = 200
#: The most characters of why a preview stopped early.
MAX_REASON_CHARS = 200
#: The most characters of a file name or a version's label.
MAX_LABEL_CHARS = 255
#: Request bodies of ``POST /apps/{name}/previews`` over this many bytes get 413.
MAX_BODY_BYTES = 256 * 2**10
#: The paths whose bodies :data:`MAX_BODY_BYTES` bounds (a regular expression).
PATH_PATTERN = r"^/apps/[^/]+/previews$"
