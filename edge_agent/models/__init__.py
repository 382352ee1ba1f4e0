"""Model versions at a site: the signed versions the hub sends, verified, kept and installed for scoring.

:mod:`~edge_agent.models.store` keeps the accepted versions under the state
directory (private files), :mod:`~edge_agent.models.intake` verifies each
message the hub sends and installs the version for the site's predict
operators, :mod:`~edge_agent.models.drift` measures how far the records a
site scores have moved from those a version was trained on.
"""
