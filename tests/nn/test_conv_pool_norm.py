"""Convolution, pooling, batch norm and the activations of a CNN against torch: the same code
under both libraries on the same inputs and weights, float64; values and every gradient agree.
Plus gradcheck (finite differences) on the ops, torch's names and initialisation on the
modules, and errors that name the op and the shapes."""

import math

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
import minitensor.nn as nn

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch
TF = torch.nn.functional


def _leaves(rng, shapes, integers=False):
    """The same float64 leaves in both libraries (small integers: ties in max pooling)."""
    pairs = []
    for shape in shapes:
        a = (
            rng.integers(-3, 4, shape).astype(np.float64)
            if integers
            else rng.standard_normal(shape)
        )
        pairs.append(
            (torch.tensor(a, requires_grad=True), mt.from_numpy(a.copy(), requires_grad=True))
        )
    return pairs


def _check(torch_fn, our_fn, shapes, seed=0, integers=False, **kwargs):
    """Run fn(*leaves, **kwargs) under both; compare the output and every leaf's gradient of
    a random weighting of it (and return_indices' indices, exactly)."""
    rng = np.random.default_rng(seed)
    leaves = _leaves(rng, shapes, integers)
    theirs = torch_fn(*(t for t, _ in leaves), **kwargs)
    ours = our_fn(*(m for _, m in leaves), **kwargs)
    if isinstance(theirs, tuple):
        np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())
        assert ours[1].dtype == np.int64
        theirs, ours = theirs[0], ours[0]
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-12, atol=1e-12)
    w = rng.standard_normal(tuple(theirs.shape))
    (theirs * torch.tensor(w)).sum().backward()
    (ours * mt.from_numpy(w)).sum().backward()
    for i, (t, m) in enumerate(leaves):
        np.testing.assert_allclose(
            m.grad.numpy(), t.grad.numpy(), rtol=1e-11, atol=1e-12, err_msg=f"gradient of input {i}"
        )


CONV2D = [
    # (input, weight, bias?), keywords
    ((2, 3, 7, 6), (4, 3, 3, 3), True, {}),
    ((2, 3, 7, 6), (4, 3, 3, 3), False, dict(stride=2, padding=1)),
    (
        (1, 4, 8, 9),
        (6, 2, 3, 2),
        True,
        dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
    ),
    ((2, 4, 6, 6), (4, 1, 3, 3), True, dict(padding=1, groups=4)),  # depthwise
    ((2, 3, 7, 6), (5, 3, 4, 3), True, dict(padding="same")),  # even kernel: extra pad after
    ((2, 3, 9, 8), (5, 3, 2, 3), False, dict(padding="same", dilation=(2, 3))),
    ((2, 3, 7, 6), (4, 3, 3, 3), True, dict(padding="valid", stride=(1, 3))),
    ((3, 7, 6), (4, 3, 3, 3), True, dict(padding=2)),  # unbatched (C, H, W)
    ((2, 2, 5, 5), (3, 2, 1, 1), True, {}),  # 1 × 1
    ((2, 2, 4, 4), (3, 2, 4, 4), True, {}),  # the kernel covers the whole image
]


@pytest.mark.parametrize("x, w, bias, kwargs", CONV2D)
def test_conv2d_matches_torch(x, w, bias, kwargs):
    shapes = [x, w] + ([(w[0],)] if bias else [])
    _check(TF.conv2d, F.conv2d, shapes, **kwargs)


CONV1D = [
    ((2, 3, 9), (4, 3, 3), True, {}),
    ((2, 4, 11), (6, 2, 3), True, dict(stride=2, padding=1, dilation=2, groups=2)),
    ((2, 3, 8), (4, 3, 4), False, dict(padding="same")),
    ((3, 10), (5, 3, 2), True, dict(stride=3, padding="valid")),  # unbatched (C, L)
]


@pytest.mark.parametrize("x, w, bias, kwargs", CONV1D)
def test_conv1d_matches_torch(x, w, bias, kwargs):
    shapes = [x, w] + ([(w[0],)] if bias else [])
    _check(TF.conv1d, F.conv1d, shapes, **kwargs)


POOL2D = [
    ((2, 3, 7, 6), dict(kernel_size=2)),
    ((2, 3, 7, 6), dict(kernel_size=3, stride=2, padding=1)),
    ((2, 3, 9, 8), dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 1))),
    ((3, 6, 6), dict(kernel_size=3, stride=1)),  # unbatched, overlapping windows
]


@pytest.mark.parametrize("x, kwargs", POOL2D)
@pytest.mark.parametrize("integers", [False, True], ids=["distinct", "ties"])
def test_max_pool2d_matches_torch(x, kwargs, integers):
    """Values, gradients (to the first maximum of a window when several tie, as torch) and
    return_indices, with and without dilation."""
    _check(TF.max_pool2d, F.max_pool2d, [x], integers=integers, return_indices=True, **kwargs)
    if x[-1] >= 6:
        _check(TF.max_pool2d, F.max_pool2d, [x], integers=integers, dilation=2, **kwargs)


@pytest.mark.parametrize("x, kwargs", POOL2D)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d_matches_torch(x, kwargs, count_include_pad):
    _check(TF.avg_pool2d, F.avg_pool2d, [x], count_include_pad=count_include_pad, **kwargs)


def test_avg_pool2d_divisor_override_matches_torch():
    _check(
        TF.avg_pool2d, F.avg_pool2d, [(2, 3, 7, 6)], kernel_size=3, padding=1, divisor_override=4
    )


@pytest.mark.parametrize(
    "kwargs",
    [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=4, stride=1)],
)
def test_pool1d_matches_torch(kwargs):
    _check(TF.max_pool1d, F.max_pool1d, [(2, 3, 9)], return_indices=True, **kwargs)
    _check(TF.max_pool1d, F.max_pool1d, [(3, 9)], integers=True, **kwargs)
    _check(TF.avg_pool1d, F.avg_pool1d, [(2, 3, 9)], **kwargs)
    _check(TF.avg_pool1d, F.avg_pool1d, [(3, 9)], count_include_pad=False, **kwargs)


def test_gradcheck_conv_and_pool():
    rng = np.random.default_rng(0)
    leaf = lambda *s: mt.from_numpy(rng.standard_normal(s), requires_grad=True)  # noqa: E731
    x, w, b = leaf(1, 4, 5, 6), leaf(4, 2, 3, 2), leaf(4)
    assert mt.gradcheck(
        lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=1, groups=2), x, w, b
    )
    assert mt.gradcheck(
        lambda x, w: F.conv1d(x, w, padding="same", dilation=2), leaf(2, 2, 7), leaf(3, 2, 3)
    )
    assert mt.gradcheck(lambda x: F.max_pool2d(x, 3, stride=2, padding=1), x)
    assert mt.gradcheck(
        lambda x: F.avg_pool2d(x, (2, 3), stride=1, count_include_pad=False, padding=1), x
    )


# ------------------------------------------------------------------ modules
def _load(ours, theirs):
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.load_state_dict(theirs.state_dict(), strict=True) == ([], [])


def _same_module(ours, theirs, shape, seed=0):
    """One forward and backward of both modules on the same input: output, input gradient and
    every parameter's gradient."""
    rng = np.random.default_rng(seed)
    ((t_x, m_x),) = _leaves(rng, [shape])
    t_y, m_y = theirs(t_x), ours(m_x)
    np.testing.assert_allclose(m_y.numpy(), t_y.detach().numpy(), rtol=1e-12, atol=1e-12)
    w = rng.standard_normal(tuple(t_y.shape))
    (t_y * torch.tensor(w)).sum().backward()
    (m_y * mt.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(m_x.grad.numpy(), t_x.grad.numpy(), rtol=1e-11, atol=1e-12)
    mine = dict(ours.named_parameters())
    for name, p in theirs.named_parameters():
        np.testing.assert_allclose(mine[name].grad.numpy(), p.grad.numpy(), rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize(
    "name, args, kwargs, shape",
    [
        ("Conv2d", (3, 6, 3), dict(stride=2, padding=1), (2, 3, 8, 7)),
        ("Conv2d", (4, 6, (3, 2)), dict(groups=2, bias=False, dilation=(2, 1)), (2, 4, 8, 7)),
        ("Conv2d", (3, 4, 4), dict(padding="same"), (3, 7, 6)),
        ("Conv1d", (3, 5, 3), dict(stride=2, padding=1), (2, 3, 9)),
        ("Conv1d", (4, 4, 3), dict(groups=4, padding="same"), (2, 4, 9)),
    ],
)
def test_conv_modules_load_torchs_weights_and_match(name, args, kwargs, shape):
    torch.manual_seed(0)
    theirs = getattr(torch.nn, name)(*args, **kwargs).double()
    ours = getattr(nn, name)(*args, **kwargs, dtype=mt.float64)
    _load(ours, theirs)
    _same_module(ours, theirs, shape)
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("name, args", [("Conv2d", (8, 16, 3)), ("Conv1d", (12, 32, 5))])
def test_conv_initialisation_is_torchs_kaiming_uniform(name, args):
    """kaiming_uniform_(a=√5) on the weight is U(±1/√fan_in), fan_in = in/groups · ∏kernel;
    the bias is U(±1/√fan_in) too. Compared by their spread with torch's own draws."""
    mt.manual_seed(0)
    torch.manual_seed(0)
    ours, theirs = getattr(nn, name)(*args, groups=2), getattr(torch.nn, name)(*args, groups=2)
    fan_in = args[0] // 2 * math.prod(ours.kernel_size)
    bound = 1 / math.sqrt(fan_in)
    for pname in ("weight", "bias"):
        mine, ref = getattr(ours, pname).numpy(), getattr(theirs, pname).detach().numpy()
        assert mine.shape == ref.shape and mine.dtype == np.float32
        assert np.abs(mine).max() <= bound and np.abs(ref).max() <= bound
        assert np.abs(mine).max() > 0.8 * bound
    w = ours.weight.numpy()
    assert abs(w.std() - bound / math.sqrt(3)) < 0.1 * bound


@pytest.mark.parametrize(
    "name, kwargs, shape",
    [
        ("MaxPool2d", dict(kernel_size=3, stride=2, padding=1), (2, 3, 7, 6)),
        ("MaxPool2d", dict(kernel_size=2, return_indices=True), (2, 3, 6, 6)),
        ("MaxPool1d", dict(kernel_size=3, stride=1, padding=1, dilation=2), (2, 3, 9)),
        ("AvgPool2d", dict(kernel_size=(3, 2), padding=1, count_include_pad=False), (2, 3, 7, 6)),
        ("AvgPool1d", dict(kernel_size=3, stride=2), (2, 3, 9)),
        ("Flatten", {}, (2, 3, 4, 5)),
        ("Flatten", dict(start_dim=0, end_dim=2), (2, 3, 4, 5)),
        ("Unflatten", dict(dim=1, unflattened_size=(3, 4)), (2, 12, 5)),
        ("Unflatten", dict(dim=-1, unflattened_size=(2, -1)), (2, 3, 8)),
        ("LeakyReLU", {}, (4, 5)),
        ("LeakyReLU", dict(negative_slope=0.2), (4, 5)),
        ("ELU", dict(alpha=0.7), (4, 5)),
        ("Softplus", dict(beta=2.0, threshold=3.0), (4, 5)),
        ("Hardtanh", dict(min_val=-0.5, max_val=0.8), (4, 5)),
        ("ReLU6", {}, (4, 5)),
    ],
)
def test_parameter_free_modules_match_torch(name, kwargs, shape):
    theirs, ours = getattr(torch.nn, name)(**kwargs), getattr(nn, name)(**kwargs)
    if kwargs.get("return_indices"):  # (values, indices)
        _check(theirs, ours, [shape])
        return
    scale = 4.0 if name in ("Softplus", "ELU", "ReLU6", "Hardtanh") else 1.0
    _check(lambda x: theirs(x * scale), lambda x: ours(x * scale), [shape])
    assert repr(ours) == repr(theirs)


@pytest.mark.parametrize("name", ["LeakyReLU", "ELU", "Softplus", "Hardtanh", "ReLU6"])
def test_activations_at_their_kinks_and_extremes_match_torch(name):
    """At 0, at Hardtanh's and ReLU6's bounds, and far out (where e^x overflows), the values
    and the gradients are torch's."""
    points = [-1e4, -800.0, -6.0, -1.0, -0.5, 0.0, 0.5, 1.0, 6.0, 10.0, 25.0, 800.0, 1e4]
    a = np.array(points)
    t_x, m_x = torch.tensor(a, requires_grad=True), mt.from_numpy(a.copy(), requires_grad=True)
    theirs, ours = getattr(torch.nn, name)(), getattr(nn, name)()
    t_y, m_y = theirs(t_x), ours(m_x)
    np.testing.assert_allclose(m_y.numpy(), t_y.detach().numpy(), rtol=1e-12, atol=1e-300)
    t_y.sum().backward()
    m_y.sum().backward()
    np.testing.assert_allclose(m_x.grad.numpy(), t_x.grad.numpy(), rtol=1e-12, atol=1e-300)


# ------------------------------------------------------------------ batch norm
BATCH_NORM = [
    ("BatchNorm1d", {}, (6, 4)),
    ("BatchNorm1d", {}, (5, 4, 3)),
    ("BatchNorm2d", {}, (3, 4, 5, 2)),
    ("BatchNorm2d", dict(momentum=None), (3, 4, 5, 2)),
    ("BatchNorm2d", dict(affine=False, momentum=0.3, eps=1e-3), (3, 4, 5, 2)),
    ("BatchNorm1d", dict(track_running_stats=False), (5, 4, 3)),
    ("BatchNorm1d", dict(bias=False), (6, 4)),
]


@pytest.mark.parametrize("name, kwargs, shape", BATCH_NORM)
def test_batch_norm_trains_and_evaluates_as_torch(name, kwargs, shape):
    """Three training steps (each batch's statistics normalise, the running ones follow),
    then eval mode (the running ones normalise): outputs, gradients, buffers and
    num_batches_tracked agree with torch at every step; the state_dict has torch's keys."""
    torch.manual_seed(0)
    theirs = getattr(torch.nn, name)(4, **kwargs).double()
    ours = getattr(nn, name)(4, **kwargs, dtype=mt.float64)
    with torch.no_grad():  # γ and β not 1 and 0, so that a wrong one would show
        for p in theirs.parameters():
            p.uniform_(0.5, 1.5)
    _load(ours, theirs)
    for step in range(4):
        if step == 3:
            theirs.eval()
            ours.eval()
        _same_module(ours, theirs, shape, seed=step)
        for key, value in theirs.state_dict().items():
            np.testing.assert_allclose(
                ours.state_dict()[key], value.numpy(), rtol=1e-12, err_msg=key
            )
        for p in list(ours.parameters()) + list(theirs.parameters()):
            p.grad = None


def test_batch_norm_buffers_are_torchs():
    ours, theirs = nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)
    assert {k: (v.dtype, v.shape) for k, v in ours.state_dict().items()} == {
        k: (np.dtype(str(v.dtype).replace("torch.", "")), tuple(v.shape))
        for k, v in theirs.state_dict().items()
    }
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert repr(ours) == repr(theirs)
    for kwargs in (dict(affine=False), dict(bias=False)):
        assert repr(nn.BatchNorm1d(3, **kwargs)) == repr(torch.nn.BatchNorm1d(3, **kwargs))


def test_batch_norm_functional_matches_torch():
    for training in (True, False):
        rng = np.random.default_rng(1)
        (t_x, m_x), (t_w, m_w), (t_b, m_b) = _leaves(rng, [(4, 3, 5), (3,), (3,)])
        mean, var = rng.standard_normal(3), rng.random(3) + 0.5
        t_stats = [torch.tensor(mean), torch.tensor(var)]
        m_stats = [mt.from_numpy(mean.copy()), mt.from_numpy(var.copy())]
        t_y = TF.batch_norm(t_x, *t_stats, t_w, t_b, training, 0.2, 1e-4)
        m_y = F.batch_norm(m_x, *m_stats, m_w, m_b, training, 0.2, 1e-4)
        np.testing.assert_allclose(m_y.numpy(), t_y.detach().numpy(), rtol=1e-12)
        for t, m in zip(t_stats, m_stats):
            np.testing.assert_allclose(m.numpy(), t.numpy(), rtol=1e-12)


# ------------------------------------------------------------------ a small CNN
def test_a_small_cnn_trains_as_in_torch():
    """Conv → BatchNorm → ReLU → MaxPool → Conv → AvgPool → Flatten → Linear, three SGD steps
    with momentum, the same code under both libraries: the losses agree at every step."""

    def build(lib):
        n = lib.nn
        return n.Sequential(
            n.Conv2d(1, 4, 3, padding=1),
            n.BatchNorm2d(4),
            n.ReLU(),
            n.MaxPool2d(2),
            n.Conv2d(4, 6, 3, padding="same", groups=2),
            n.LeakyReLU(0.1),
            n.AvgPool2d(2),
            n.Flatten(),
            n.Linear(6 * 2 * 2, 3),
        )

    torch.manual_seed(0)
    theirs = build(torch).double()
    ours = build(mt).double()
    _load(ours, theirs)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 1, 8, 8)), rng.integers(0, 3, 8)
    t_opt = torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9)
    m_opt = mt.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        t_loss = TF.cross_entropy(theirs(torch.tensor(x)), torch.tensor(y))
        m_loss = F.cross_entropy(ours(mt.from_numpy(x)), mt.from_numpy(y))
        np.testing.assert_allclose(m_loss.item(), t_loss.item(), rtol=1e-10)
        for opt, loss in ((t_opt, t_loss), (m_opt, m_loss)):
            opt.zero_grad()
            loss.backward()
            opt.step()


# ------------------------------------------------------------------ errors
def test_errors_name_the_op_and_the_shapes():
    x = mt.randn(2, 3, 8, 8)
    with pytest.raises(ValueError, match=r"conv2d.*\(2, 3, 8, 8\) has 3 channels.*\(4, 2, 3, 3\)"):
        F.conv2d(x, mt.randn(4, 2, 3, 3))
    with pytest.raises(ValueError, match=r"conv2d.*padding='same'.*strided"):
        F.conv2d(x, mt.randn(4, 3, 3, 3), stride=2, padding="same")
    with pytest.raises(ValueError, match=r"conv2d.*smaller than the kernel"):
        F.conv2d(x, mt.randn(4, 3, 9, 9))
    with pytest.raises(ValueError, match=r"conv1d.*\(2, 3, 8, 8\)"):
        F.conv1d(x, mt.randn(4, 3, 3))
    with pytest.raises(ValueError, match="avg_pool2d: padding .* at most half"):
        F.avg_pool2d(x, 2, padding=2)
    with pytest.raises(ValueError, match="Conv2d: in_channels .* divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match=r"BatchNorm2d.*4-D.*\(2, 3\)"):
        nn.BatchNorm2d(3)(mt.randn(2, 3))
    with pytest.raises(ValueError, match="batch_norm: expected more than 1 value per channel"):
        nn.BatchNorm1d(3)(mt.randn(1, 3))
    with pytest.raises(ValueError, match=r"Unflatten.*\(2, 12\).*\(5, 2\)"):
        nn.Unflatten(1, (5, 2))(mt.randn(2, 12))
