"""minitensor.viz: see what the model computes.

- `draw_graph(loss)`: the computation graph as nested module clusters, collapsible by depth,
  with a node budget; `draw_graph(loss, highlight=step)` marks a backward step.
- `trace()`: print every op as it runs (scope, op, shapes, value range, NaN/saturation marks).

The step-through itself is `loss.backward_steps()` (in `minitensor.autograd`), and anomaly
mode is `mt.autograd.detect_anomaly()`; `demos/step_backward.py` puts them together.
"""
from .graph import (DEFAULT_MAX_NODES, INSTALL_HINT, Graph, GraphvizNotFound, count_boxes,
                    draw_graph, scope_units)
from .trace import TraceRecord, trace

__all__ = ["draw_graph", "trace", "TraceRecord", "Graph", "GraphvizNotFound", "count_boxes",
           "scope_units", "DEFAULT_MAX_NODES", "INSTALL_HINT"]
