"""What to call an op when it is really a named parameter seen another way.

`nn.Linear` computes ``x @ weight.T``: the graph records a `permute` node whose only input is the
parameter. Shown as ``permute (64, 32)`` it is an anonymous reshuffle; shown as
``w_q.weightᵀ (64, 32)`` it is what the layer's formula says, xWᵀ. The graph viewer, the trace
and the step-through all name such nodes with `op_label`.
"""

from ..nn.module import Parameter

TRANSPOSE = "ᵀ"


def transposed_parameter(name, inputs):
    """The Parameter that op `name` transposes, when it is a 2-D parameter's transpose, else None.

    inputs: the op's input Tensors (a node's ``inputs``; None for non-tensor arguments).
    """
    if name != "permute":
        return None
    tensors = [t for t in inputs if t is not None]
    if len(tensors) != 1 or not isinstance(tensors[0], Parameter) or tensors[0].ndim != 2:
        return None
    return tensors[0] if tensors[0].name else None


def op_label(name, inputs, full=True):
    """'encoder.layers.0.self_attn.w_q.weightᵀ' (full) or 'weightᵀ' for a parameter's transpose;
    the op's name otherwise."""
    param = transposed_parameter(name, inputs)
    if param is None:
        return name
    return (param.name if full else param.name.rsplit(".", 1)[-1]) + TRANSPOSE


def node_label(node, full=True):
    """`op_label` of a graph node (a Context)."""
    return op_label(node.name, node.inputs, full)


def describe_node(node):
    """'`matmul` in encoder.layers.0.self_attn (created at model.py:42)', with a parameter's
    transpose named as such and a notebook line as 'cell [3], line 5'."""
    from ._source import describe_source

    text = f"`{node_label(node)}`"
    if node.scope:
        text += f" in {node.scope}"
    if node.source:
        text += f" (created at {describe_source(*node.source[:2])})"
    return text
