"""Models trained at the hub and evaluated wherever a ``predict`` operator runs.

:mod:`~spanedge.models.spec` holds the declaration (``app.model(...)``),
:mod:`~spanedge.models.portable` a trained version's parameters and their
plain-Python evaluation, :mod:`~spanedge.models.stats` the feature statistics
a version was trained on, :mod:`~spanedge.models.envelope` the signed form a
version travels in, and :mod:`~spanedge.models.predict` the operator's function.
No module here needs numpy, Spark or the JVM.
"""

from spanedge.models.spec import Algorithm, ModelSpec

__all__ = ["Algorithm", "ModelSpec"]
