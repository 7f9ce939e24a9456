"""minitensor.viz: see what the model computes.

- `draw_graph(loss)`: the computation graph as nested module clusters, collapsible by depth,
  within a box budget that fits a screen; `draw_graph(loss, highlight=step)` marks a backward step.
- `describe_step(step)`, `step_graph(step, loss)`, `step_svg(step, loss)`: one step of
  ``loss.backward_steps()`` as text and as the graph with its node marked (`step_mimebundle` is
  what a notebook shows for a step).
- `explore(loss, model)`: the graph as one offline HTML page to move through (modules that open
  on click, zoom, search, node details, a backward-step slider); shown inline in a notebook.
- `trace()`: print every op as it runs (scope, op, shapes, value range, NaN/saturation marks).
- `describe_source(filename, lineno)`: 'model.py:42', or 'cell [3], line 5' in a notebook.

The step-through itself is `loss.backward_steps()` (in `minitensor.autograd`), and anomaly
mode is `mt.autograd.detect_anomaly()`; `demos/step_backward.py` puts them together.
"""

from .. import autograd as _autograd
from ._labels import describe_node, op_label
from ._source import describe_source
from .explore import Explorer, explore
from .graph import (
    DEFAULT_MAX_NODES,
    INSTALL_HINT,
    Graph,
    GraphvizNotFound,
    count_boxes,
    draw_graph,
    scope_units,
)
from .step import describe_step, step_graph, step_mimebundle, step_svg
from .trace import TraceRecord, trace

# A backward step shows itself in a notebook through this hook: the core never imports the
# viewer (data flows one way), so the viewer registers its drawing with the core.
_autograd.BackwardStep._display_hook = step_mimebundle

__all__ = [
    "draw_graph",
    "explore",
    "Explorer",
    "trace",
    "TraceRecord",
    "Graph",
    "GraphvizNotFound",
    "count_boxes",
    "scope_units",
    "DEFAULT_MAX_NODES",
    "INSTALL_HINT",
    "describe_step",
    "step_graph",
    "step_svg",
    "step_mimebundle",
    "describe_source",
    "describe_node",
    "op_label",
]
