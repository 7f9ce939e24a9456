"""What the graph keeps alive: only what backward needs, as in PyTorch.

A node holds the arrays its backward saved (freed after that backward) and the nodes that feed
it; an intermediate tensor that nobody holds and no backward needs is freed during forward.
Each test watches an array through a weakref, so it fails if a mechanism starts keeping it.
"""

import gc
import threading
import weakref

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from minitensor.function import NodeInput


def test_an_intermediate_no_backward_needs_is_freed_during_forward():
    x = mt.randn(4, 5, requires_grad=True)
    h = x * 3.0  # mul saves x and 3.0, not its output
    y = h + 1.0  # add saves nothing
    data = weakref.ref(h.numpy())
    del h
    gc.collect()
    assert data() is None
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full((4, 5), 3.0, np.float32))


def test_a_node_refers_to_an_intermediate_input_by_its_node_shape_and_dtype():
    x = mt.randn(2, 3, requires_grad=True)
    h = x.exp()
    h.name = "h"
    y = h + 1.0
    (edge, _) = y.grad_fn.inputs
    assert isinstance(edge, NodeInput)
    assert edge.grad_fn is h.grad_fn and edge.shape == (2, 3) and edge.dtype == mt.float32
    assert edge.requires_grad and edge.name == "h" and edge.ndim == 2
    assert edge.data is h.numpy()  # while the program holds h
    assert y.grad_fn.parents == [h.grad_fn, None]
    assert (x * 2.0).grad_fn.inputs[0] is x  # a leaf stays itself: it receives .grad
    z = (x * 2.0) + 1.0
    gc.collect()
    assert z.grad_fn.inputs[0].data is None  # x * 2.0: held by no one, freed


def test_saved_arrays_are_freed_by_backward_unless_the_graph_is_retained():
    for retain in (False, True):
        x = mt.randn(3, 4, requires_grad=True)
        w = mt.randn(4, 2, requires_grad=True)
        h = x * 2.0
        loss = (h @ w).sum()  # matmul saves h's array
        saved = weakref.ref(h.numpy())
        del h
        gc.collect()
        assert saved() is not None
        loss.backward(retain_graph=retain)
        gc.collect()
        assert (saved() is not None) == retain
        # the output gradient stays on the node only for the viewer of a retained graph
        assert (loss.grad_fn.grad is not None) == retain


def test_keep_intermediates_keeps_every_input_tensor_and_is_per_thread():
    x = mt.randn(3, requires_grad=True)
    with mt.autograd.keep_intermediates():
        y = (x * 3.0) + 1.0
        seen = []
        other = threading.Thread(target=lambda: seen.append(((x * 2.0) + 1.0).grad_fn.inputs))
        other.start()
        other.join()
    kept = y.grad_fn.inputs[0]
    assert isinstance(kept, mt.Tensor) and kept.grad_fn is not None
    np.testing.assert_array_equal(kept.numpy(), x.numpy() * 3.0)
    assert isinstance(seen[0][0], NodeInput)  # the other thread kept the default
    assert isinstance(((x * 3.0) + 1.0).grad_fn.inputs[0], NodeInput)  # restored on exit


@pytest.mark.parametrize("batch", [(5,), (3, 5)])
def test_linear_weight_gradient_is_c_ordered_and_exact(batch):
    # x @ weight.T: the weight's gradient is computed in the weight's own layout, so the
    # optimizer reads it without copying
    mt.manual_seed(0)
    lin = mt.nn.Linear(6, 4).double()
    x = mt.randn(*batch, 6, dtype=mt.float64)
    g = mt.randn(*batch, 4, dtype=mt.float64)
    lin(x).backward(g)
    grad = lin.weight.grad.numpy()
    assert grad.flags.c_contiguous
    expected = g.numpy().reshape(-1, 4).T @ x.numpy().reshape(-1, 6)
    np.testing.assert_allclose(grad, expected, rtol=1e-12, atol=1e-12)
    w = mt.randn(4, 6, dtype=mt.float64, requires_grad=True)
    assert mt.gradcheck(lambda w: F.linear(x, w).sum(), w)


def test_graph_nodes_keep_their_output_gradient_only_for_a_retained_graph():
    """A plain backward frees each node's output gradient with the graph (the memory of a
    whole step's activations' gradients); backward(retain_graph=True) keeps it for the viewer."""
    x = mt.randn(3, requires_grad=True)
    loss = (x * 2).exp().sum()
    loss.backward()
    assert loss.grad_fn.grad is None and x.grad is not None
    loss = (x * 2).exp().sum()
    loss.backward(retain_graph=True)
    np.testing.assert_array_equal(loss.grad_fn.grad, np.ones((), np.float32))
