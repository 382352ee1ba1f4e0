"""Models at the hub: training with ``pyspark.ml``, export to the portable form, the registry of versions.

:mod:`~hub.models.training` fits a version on a DataFrame of labelled
records, :mod:`~hub.models.export` turns the fitted Spark model into
:mod:`spanedge.models.portable` parameters, :mod:`~hub.models.registry`
keeps every version under ``<state_dir>/models/`` and :mod:`~hub.models.service`
trains on demand and on schedule from the records the hub holds.
"""
