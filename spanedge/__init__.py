"""SpanEdge: one Python dataflow across edge sites and a Spark hub.

>>> from spanedge import App, agg, local, global_, sinks
"""

from spanedge import aggregations as agg
from spanedge import sinks
from spanedge.app import App, Stream
from spanedge.errors import SpanEdgeError
from spanedge.scope import global_, local

__all__ = ["App", "SpanEdgeError", "Stream", "agg", "global_", "local", "sinks"]
__version__ = "0.1.0"
