"""Issue 22's everyday surface: each new op's gradient against finite differences, and the
same code run under torch and minitensor for what torch's OpInfo database does not cover
(hooks, grad modes, schedulers, creators, methods, activations at their kinks)."""

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F

torch = pytest.importorskip("torch")


def _t(lib, data, grad=False, dtype=None):
    arr = np.asarray(data, dtype=dtype or np.float64)
    if lib is torch:
        return torch.tensor(arr, requires_grad=grad)
    return mt.tensor(arr, dtype=arr.dtype, requires_grad=grad)


def _np(x):
    if x is None:  # no gradient reached it (in both libraries, checked by the caller)
        return None
    return x.detach().numpy() if isinstance(x, torch.Tensor) else np.asarray(x.numpy())


# ------------------------------------------------------------------ gradients (float64)
rng = np.random.default_rng(22)
INSIDE = rng.uniform(-0.9, 0.9, (3, 4))  # inside (−1, 1): asin, acos, atanh
POSITIVE = rng.uniform(1.2, 3.0, (3, 4))  # > 1: log*, rsqrt, acosh
ANY = rng.standard_normal((3, 4))

UNARY = {
    "tan": INSIDE, "asin": INSIDE, "acos": INSIDE, "atan": ANY, "sinh": ANY, "cosh": ANY,
    "asinh": ANY, "acosh": POSITIVE, "atanh": INSIDE, "log2": POSITIVE, "log10": POSITIVE,
    "log1p": POSITIVE, "expm1": ANY, "exp2": ANY, "erf": ANY, "erfc": ANY, "rsqrt": POSITIVE,
    "reciprocal": POSITIVE, "deg2rad": ANY, "rad2deg": ANY, "square": ANY, "frac": POSITIVE,
    "nan_to_num": ANY,
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradients(name):
    x = mt.tensor(UNARY[name], dtype=mt.float64, requires_grad=True)
    assert mt.gradcheck(getattr(F, name), x)


BINARY = {
    "atan2": (ANY, POSITIVE), "remainder": (POSITIVE * 2.7 - 5, POSITIVE),
    "fmod": (ANY * 3, POSITIVE), "logaddexp": (ANY, ANY[::-1]), "hypot": (ANY, POSITIVE),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradients(name):
    a, b = (mt.tensor(v, dtype=mt.float64, requires_grad=True) for v in BINARY[name])
    assert mt.gradcheck(getattr(F, name), a, b)


WITH_ZEROS = np.array([[1.5, 0.0, -2.0, 0.5], [0.0, 0.0, 3.0, -1.0], [2.0, 1.1, -0.7, 1.3]])
SHAPED = {
    "prod over all, zeros": (lambda x: F.prod(x), WITH_ZEROS),
    "prod over dim 1": (lambda x: F.prod(x, 1), WITH_ZEROS),
    "cumprod with zeros": (lambda x: F.cumprod(x, 1), WITH_ZEROS),
    "cumprod without zeros": (lambda x: F.cumprod(x, 0), POSITIVE),
    "amax over dim 0": (lambda x: F.amax(x, 0), ANY),
    "median": (lambda x: F.median(x), ANY),
    "median over dim 1": (lambda x: F.median(x, 1).values, ANY),
    "norm 2": (lambda x: F.norm(x), ANY),
    "norm 3 over dim 1": (lambda x: F.norm(x, 3, 1), ANY),
    "norm inf": (lambda x: F.norm(x, float("inf"), 0), ANY),
    "flip": (lambda x: F.flip(x, (0, 1)), ANY),
    "roll": (lambda x: F.roll(x, (1, -2), (0, 1)), ANY),
    "roll flat": (lambda x: F.roll(x, 5), ANY),
    "diagonal +1": (lambda x: F.diagonal(x, 1), ANY),
    "diagonal −1": (lambda x: F.diagonal(x, -1, 1, 0), ANY),
    "repeat_interleave counts": (lambda x: F.repeat_interleave(x, mt.tensor([2, 0, 1]), 0), ANY),
    "repeat_interleave flat": (lambda x: F.repeat_interleave(x, 2), ANY),
    "tile": (lambda x: F.tile(x, (2, 1, 2)), ANY),
    "narrow": (lambda x: F.narrow(x, 1, -3, 2), ANY),
    "unbind": (lambda x: F.unbind(x, 1)[2], ANY),
    "masked_select": (lambda x: F.masked_select(x, mt.tensor(ANY > 0)), ANY),
    "movedim": (lambda x: F.movedim(x, 0, 1), ANY),
    "outer": (lambda x: F.outer(x[0], x[1]), ANY),
    "addmm": (lambda x: F.addmm(x[:, :2], x, x.T[:, :2], beta=0.5, alpha=2), ANY),
    "softplus": (lambda x: F.softplus(x, beta=2, threshold=1), ANY),
    "normalize": (lambda x: F.normalize(x, dim=0), ANY),
    "binary_cross_entropy": (lambda x: F.binary_cross_entropy(F.sigmoid(x), INSIDE / 2 + 0.5), ANY),
    "bce_with_logits": (
        lambda x: F.binary_cross_entropy_with_logits(x, INSIDE / 2 + 0.5, pos_weight=POSITIVE[0]),
        ANY,
    ),
}


@pytest.mark.parametrize("name", sorted(SHAPED))
def test_shaped_gradients(name):
    fn, data = SHAPED[name]
    assert mt.gradcheck(fn, mt.tensor(data, dtype=mt.float64, requires_grad=True))


# ------------------------------------------------------------------ the same code, two libraries
def _both(fn, *data, grad=True):
    """fn run under torch and minitensor on the same float64 data: values and gradients."""
    out = {}
    for lib in (torch, mt):
        xs = [_t(lib, d, grad) for d in data]
        y = fn(lib, *xs)
        grads = ()
        if grad:
            y.sum().backward() if lib is mt else y.sum().backward()
            grads = tuple(_np(x.grad) for x in xs)
        out[lib] = (_np(y), grads)
    # not tighter: torch's float64 celu, hardsigmoid and hardswish use float32 constants
    # (1/6 is 0.1666666716 there), a relative difference of up to 3e-8
    np.testing.assert_allclose(out[mt][0], out[torch][0], rtol=1e-6, atol=1e-12)
    for a, b in zip(out[mt][1], out[torch][1]):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-12)


KINKS = np.array([-7.0, -6.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0, 7.0, 30.0])
ACTIVATIONS = {
    "leaky_relu": lambda L, x: L.nn.functional.leaky_relu(x, 0.2),
    "elu": lambda L, x: L.nn.functional.elu(x, 1.5),
    "celu": lambda L, x: L.nn.functional.celu(x, 0.7),
    "selu": lambda L, x: L.nn.functional.selu(x),
    "softplus": lambda L, x: L.nn.functional.softplus(x, beta=0.5, threshold=3.0),
    "hardtanh": lambda L, x: L.nn.functional.hardtanh(x, -3.0, 6.0),
    "relu6": lambda L, x: L.nn.functional.relu6(x),
    "hardsigmoid": lambda L, x: L.nn.functional.hardsigmoid(x),
    "hardswish": lambda L, x: L.nn.functional.hardswish(x),
    "logsigmoid": lambda L, x: L.nn.functional.logsigmoid(x),
    "softsign": lambda L, x: L.nn.functional.softsign(x),
    "tanhshrink": lambda L, x: L.nn.functional.tanhshrink(x),
    "mish": lambda L, x: L.nn.functional.mish(x),
    "hardshrink": lambda L, x: L.nn.functional.hardshrink(x, 1.0),
    "softshrink": lambda L, x: L.nn.functional.softshrink(x, 1.0),
    "threshold": lambda L, x: L.nn.functional.threshold(x, 0.5, -2.0),
    "glu": lambda L, x: L.nn.functional.glu(x, 0),
    "normalize": lambda L, x: L.nn.functional.normalize(x.reshape(3, 4), p=1, dim=1),
    "bce_logits": lambda L, x: L.nn.functional.binary_cross_entropy_with_logits(
        x, L.sigmoid(x.flip(0).detach()), reduction="none"
    ),
    "bce_at_0_and_1": lambda L, x: L.nn.functional.binary_cross_entropy(
        L.clamp(x / 10 + 0.5, 0, 1), L.ones_like(x) * 0.25, reduction="sum"
    ),
}


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_match_torch_at_their_kinks(name):
    _both(ACTIVATIONS[name], KINKS)


@pytest.mark.torch
def test_tensor_methods_and_keywords_match_torch():
    a, b = [[7.0, -7.0, 5.5], [-5.5, 3.0, 0.0]], [[2.0, 2.0, -2.0], [2.0, -4.0, 3.0]]
    _both(lambda L, x, y: x.add(y, alpha=2) + x.sub(y, alpha=0.5) + L.add(x, y, alpha=3), a, b)
    _both(lambda L, x, y: x.where(x > 0, y) + x.mul(y).div(y.abs() + 1), a, b)
    _both(lambda L, x, y: x.var(1, correction=0) + x.std(1, correction=2).sum(), a, b)
    _both(
        lambda L, x, y: x.softmax(1, dtype=L.float64) + L.log_softmax(x, 0, dtype=L.float64), a, b
    )
    for mode in ("trunc", "floor"):
        _both(lambda L, x, y, mode=mode: L.div(x, y, rounding_mode=mode), a, b, grad=False)
        for lib_a in (np.int64,):
            ia, ib = np.array(a, lib_a), np.array(b, lib_a)
            ib[ib == 0] = 1
            theirs = torch.div(torch.tensor(ia), torch.tensor(ib), rounding_mode=mode)
            ours = mt.div(mt.tensor(ia), mt.tensor(ib), rounding_mode=mode)
            assert ours.dtype == np.int64 and (ours.numpy() == theirs.numpy()).all()
    for lib in (torch, mt):
        x = _t(lib, a)
        assert x.cpu() is x and x.nelement() == 6 and x.numel() == 6
        assert x.int().dtype == (torch.int32 if lib is torch else np.int32)
        assert x.half().dtype == (torch.float16 if lib is torch else np.float16)
    assert mt.arange(end=4).tolist() == torch.arange(end=4).tolist()
    assert mt.equal(mt.tensor([1, 2]), mt.tensor([1, 2])) is torch.equal(
        torch.tensor([1, 2]), torch.tensor([1, 2])
    )


@pytest.mark.torch
def test_register_hook_matches_torch():
    seen = {}
    for lib in (torch, mt):
        x = _t(lib, [1.0, -2.0, 3.0], grad=True)
        y = x * x
        handle = y.register_hook(lambda g: g * 10)

        def look(g, lib=lib):  # returns None: the gradient goes on unchanged
            seen[lib] = _np(g).copy()

        x.register_hook(look)
        (y.sum() + x.sum()).backward()
        first = _np(x.grad).copy()
        handle.remove()
        x.grad = None
        (x * x).sum().backward()
        seen[(lib, "after remove")] = (first, _np(x.grad))
    np.testing.assert_array_equal(seen[mt], seen[torch])
    for a, b in zip(seen[(mt, "after remove")], seen[(torch, "after remove")]):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(RuntimeError, match="does not require grad"):
        mt.ones(2).register_hook(print)


@pytest.mark.torch
def test_module_forward_hooks_match_torch():
    out = {}
    for lib in (torch, mt):
        lib.manual_seed(0)
        layer = lib.nn.Linear(3, 2).double()
        with lib.no_grad():
            layer.weight.copy_(_t(lib, [[1.0, 2.0, 3.0], [-1.0, 0.5, 0.0]]))
            layer.bias.copy_(_t(lib, [0.5, -0.5]))
        calls = []
        pre = layer.register_forward_pre_hook(lambda m, args: (args[0] * 2,))
        post = layer.register_forward_hook(
            lambda m, args, y, calls=calls: calls.append(_np(args[0])) or y + 1
        )
        kw = layer.register_forward_hook(lambda m, a, k, y: y * 3, with_kwargs=True, prepend=True)
        x = _t(lib, [[1.0, 1.0, 1.0]])
        y1 = _np(layer(x))
        pre.remove(), post.remove(), kw.remove()
        out[lib] = (y1, _np(layer(x)), calls)
    for a, b in zip(out[mt][:2], out[torch][:2]):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    np.testing.assert_array_equal(out[mt][2], out[torch][2])


@pytest.mark.torch
def test_grad_modes_match_torch():
    for lib in (torch, mt):
        x = _t(lib, [1.0], grad=True)
        with lib.set_grad_enabled(False):
            assert not (x * 2).requires_grad
        assert (x * 2).requires_grad
        lib.set_grad_enabled(False)
        assert not (x * 2).requires_grad and not lib.is_grad_enabled()
        lib.set_grad_enabled(True)
        with lib.inference_mode():
            assert not (x * 2).requires_grad
        with lib.inference_mode(False):
            assert (x * 2).requires_grad

        @lib.inference_mode()
        def f(x=x):
            return (x * 2).requires_grad

        assert not f() and (x * 2).requires_grad


def test_randperm_is_a_permutation_and_follows_its_generator():
    p = mt.randperm(10)
    assert p.dtype == np.int64 and sorted(p.tolist()) == list(range(10))
    a = mt.randperm(10, generator=mt.Generator().manual_seed(3))
    b = mt.randperm(10, generator=mt.Generator().manual_seed(3))
    assert a.tolist() == b.tolist()
    g = mt.Generator().manual_seed(3)
    assert mt.randn(4, generator=g).tolist() != mt.randn(4, generator=g).tolist()
    with pytest.raises(TypeError, match="mt.Generator"):
        mt.randperm(3, generator=np.random.default_rng(0))


def _schedule(lib, make, steps=30, metrics=None, adam=False):
    p = lib.nn.Parameter(lib.zeros(2))
    opt = lib.optim.Adam([p], lr=0.1) if adam else lib.optim.SGD([p], lr=0.1, momentum=0.9)
    sched = make(lib, opt)
    seen = []
    for i in range(steps):
        opt.step()
        sched.step(metrics[i]) if metrics else sched.step()
        group = opt.param_groups[0]
        seen.append((group["lr"], group["betas"][0] if adam else group["momentum"]))
    return np.array(seen)


SCHEDULES = {
    "OneCycleLR": lambda L, o: L.optim.lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=31),
    "OneCycleLR three_phase linear": lambda L, o: L.optim.lr_scheduler.OneCycleLR(
        o, max_lr=1.0, epochs=3, steps_per_epoch=11, three_phase=True, anneal_strategy="linear"
    ),
    "SequentialLR": lambda L, o: L.optim.lr_scheduler.SequentialLR(
        o,
        [
            L.optim.lr_scheduler.LambdaLR(o, lambda e: (e + 1) / 4),
            L.optim.lr_scheduler.CosineAnnealingLR(o, 10),
            L.optim.lr_scheduler.StepLR(o, 3, 0.5),
        ],
        milestones=[4, 12],
    ),
}


@pytest.mark.torch
@pytest.mark.parametrize("adam", [False, True])
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedulers_match_torch(name, adam):
    theirs = _schedule(torch, SCHEDULES[name], adam=adam)
    np.testing.assert_allclose(_schedule(mt, SCHEDULES[name], adam=adam), theirs, atol=1e-15)


@pytest.mark.torch
@pytest.mark.parametrize("mode", ["min", "max"])
def test_reduce_lr_on_plateau_matches_torch(mode):
    metrics = [1, 0.9, 0.9, 0.9, 0.9, 0.95, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.7] * 3

    def make(L, o):
        return L.optim.lr_scheduler.ReduceLROnPlateau(
            o, mode=mode, patience=2, cooldown=1, factor=0.5, threshold=0.01, min_lr=0.004
        )

    theirs = _schedule(torch, make, len(metrics), metrics)
    np.testing.assert_array_equal(_schedule(mt, make, len(metrics), metrics), theirs)


@pytest.mark.torch
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad", [(2, 1), (1, 2, 2, 0), (-1, 2, 1, -2)])
def test_pad_modes_match_torch(mode, pad):
    data = rng.standard_normal((2, 4, 5))  # (N, H, W): one or two padded axes
    width = 5 + pad[0] + pad[1]  # a weight per output column, so each gradient is distinct

    def padded(L, x):
        return L.nn.functional.pad(x, pad, mode=mode) * L.arange(1.0, 1.0 + width, dtype=L.float64)

    _both(padded, data)
    with pytest.raises(mt.ShapeError, match="does not fit"):
        F.pad(mt.zeros(1, 2, 3), (3, 0), mode="reflect")


# ------------------------------------------------------------------ the second batch's gradients
SECOND = {
    "fmax": (lambda x: F.fmax(x, mt.tensor(ANY * 0.5 + 0.3, dtype=mt.float64)), ANY),
    "fmin with NaN": (lambda x: F.fmin(x, mt.tensor([np.nan, 0.1, 5.0, -9.0])), ANY),
    "logaddexp2": (lambda x: F.logaddexp2(x, x * 2), ANY),
    "xlogy": (lambda x: F.xlogy(x, mt.tensor(POSITIVE)), WITH_ZEROS),
    "logit": (lambda x: F.logit(x / 2 + 0.5), INSIDE),
    "sinc": (lambda x: F.sinc(x), ANY),
    "copysign": (lambda x: F.copysign(x, mt.tensor(ANY[::-1].copy())), ANY),
    "scatter_add": (
        lambda x: F.scatter_add(x, 1, mt.tensor([[0, 0, 3], [1, 1, 1], [2, 0, 2]]), x * 2),
        ANY,
    ),
    "index_add": (lambda x: F.index_add(x, 0, mt.tensor([2, 0, 2]), x * x, alpha=2), ANY),
    "index_copy": (lambda x: F.index_copy(x, 1, mt.tensor([3, 0]), x[:, 1:3] * 3), ANY),
    "cummax": (lambda x: F.cummax(x, 1).values, ANY),
    "cummin": (lambda x: F.cummin(x, 0).values, ANY),
    "logcumsumexp": (lambda x: F.logcumsumexp(x * 300, 1), ANY),
    "kthvalue": (lambda x: F.kthvalue(x, 2, 0).values, ANY),
    "kron": (lambda x: F.kron(x[:2, :2], x), ANY),
    "cross": (lambda x: F.cross(x[:, :3], x[:, 1:], dim=1), ANY),
    "tensordot": (lambda x: F.tensordot(x, x.T, 1), ANY),
    "diag_embed": (lambda x: F.diag_embed(x, 1), ANY),
    "rot90": (lambda x: F.rot90(x, 3), ANY),
    "take_along_dim": (lambda x: F.take_along_dim(x, mt.tensor([[1], [3], [0]]), 1), ANY),
    "nanmean": (lambda x: F.nanmean(F.where(x > 1, np.nan, x), 1), ANY),
    "diff": (lambda x: F.diff(x, 2, 1, prepend=x[:, :1]), ANY),
    "gaussian_nll_loss": (lambda x: F.gaussian_nll_loss(x, x * 0 + 0.3, abs(x) + 0.1), ANY),
    "poisson_nll_loss full": (lambda x: F.poisson_nll_loss(x, abs(x) * 3, full=True), ANY),
}


@pytest.mark.parametrize("name", sorted(SECOND))
def test_second_batch_gradients(name):
    fn, data = SECOND[name]
    assert mt.gradcheck(fn, mt.tensor(data, dtype=mt.float64, requires_grad=True))


@pytest.mark.torch
def test_cummax_ties_and_nan_match_torch():
    data = [[1.0, 3.0, 3.0, 2.0, np.nan, 5.0], [0.5, -1.0, 4.0, 4.0, 4.0, -3.0]]
    _both(lambda L, x: L.cummax(x, 1).values * L.arange(1.0, 7.0, dtype=L.float64), data)
    _both(lambda L, x: L.cummin(x, 1).values.nan_to_num(0.0) * 2, data)
    for lib in (torch, mt):
        x = _t(lib, data)
        assert (
            _np(lib.cummax(x, 1).indices).tolist()
            == torch.cummax(torch.tensor(data), 1).indices.tolist()
        )


@pytest.mark.torch
def test_xlogy_at_zero_matches_torch():
    _both(lambda L, x, y: L.xlogy(x, y), [0.0, 0.0, 0.0, 2.0, 0.0], [2.0, 0.0, -1.0, 3.0, np.nan])


def test_multinomial_follows_its_generator_and_refuses_3d_probs():
    probs = mt.tensor([[0.2, 0.3, 0.5], [0.9, 0.05, 0.05]])
    draws = [mt.multinomial(probs, 6, True, generator=mt.Generator().manual_seed(5)) for _ in "ab"]
    assert draws[0].tolist() == draws[1].tolist() and draws[0].shape == (2, 6)
    with pytest.raises(mt.ShapeError, match="1-D or 2-D"):
        mt.multinomial(mt.ones(2, 2, 3), 1)
