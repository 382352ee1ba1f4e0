"""``spanedge preview``: run an app over a file of records, offline, and show what each operator did.

:mod:`~spanedge.cli.preview.records` reads the input, :mod:`~spanedge.cli.preview.run`
runs the app's edge part per site and its hub part over every site's output, and
:mod:`~spanedge.cli.preview.report` prints the result or compares two versions;
:mod:`~spanedge.cli.preview.live` reads a site's live input instead, and
:mod:`~spanedge.cli.preview.to_hub` gives the hub the summary of such a live preview.
"""

from spanedge.cli.preview.command import preview

__all__ = ["preview"]
