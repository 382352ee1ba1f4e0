"""Live previews reported to the hub: ``POST`` and ``GET /apps/{name}/previews``, and the last ones kept per app.

:mod:`.limits` holds the bounds (the command line reads them too, without pydantic),
:mod:`.models` the body and the answers, :mod:`.store` the previews kept and
:mod:`.routes` the REST routes.
"""
