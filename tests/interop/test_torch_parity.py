"""Parity with torch.autograd: random composite expressions built from many ops give the same
values and the same gradients (float64, within 1e-6) in minitensor and in PyTorch.

Each program starts from a few leaves — an embedding table, activations (B, L, D), a weight
matrix, LayerNorm's weight and bias — and applies a dozen ops picked at random from a catalog;
every op exists twice, once per library, side by side. The loss mixes cross_entropy (with
ignore_index and label smoothing), mse_loss and a weighted sum of everything produced.
Products are damped with tanh so that a dozen random ops cannot blow values up to where float64
itself loses the digits being compared.
"""

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

B, L, D, V = 2, 3, 4, 7  # batch, length, features, vocabulary (rows of the table)


def catalog(rng):
    """(name, number of operands, minitensor fn, torch fn): each keeps the (B, L, D) shape.

    Constants (index arrays, masks, weights that need no gradient) are drawn once here and
    shared by both versions of an op.
    """
    perm = rng.integers(0, L, size=L)  # repeats likely: scatter-add
    mask = rng.random((L, D)) < 0.3
    mask[:, 0] = False  # no fully masked softmax row
    causal = np.triu(np.ones((L, D), dtype=bool), k=1)
    t = torch.from_numpy
    return [
        # elementwise, unary
        ("exp∘tanh", 1, lambda a: a.tanh().exp(), lambda a: a.tanh().exp()),
        ("sigmoid", 1, lambda a: a.sigmoid(), torch.sigmoid),
        ("relu", 1, lambda a: a.relu() + 0.1 * a, lambda a: a.relu() + 0.1 * a),
        ("gelu", 1, F.gelu, TF.gelu),
        (
            "gelu_tanh",
            1,
            lambda a: F.gelu(a, approximate="tanh"),
            lambda a: TF.gelu(a, approximate="tanh"),
        ),
        ("silu", 1, F.silu, TF.silu),
        ("abs", 1, lambda a: abs(a) - 0.5, lambda a: a.abs() - 0.5),
        ("neg", 1, lambda a: -a, lambda a: -a),
        ("sqrt", 1, lambda a: (a * a + 1).sqrt(), lambda a: (a * a + 1).sqrt()),
        ("log", 1, lambda a: (a * a + 0.5).log(), lambda a: (a * a + 0.5).log()),
        (
            "pow",
            1,
            lambda a: a.tanh() ** 3 + 2.0 ** a.tanh(),
            lambda a: a.tanh() ** 3 + 2.0 ** a.tanh(),
        ),
        ("rdiv", 1, lambda a: 1.0 / (a * a + 1) - a, lambda a: 1.0 / (a * a + 1) - a),
        ("clip", 1, lambda a: a.clip(-0.8, 0.6), lambda a: a.clamp(-0.8, 0.6)),
        # elementwise, binary (including a tensor exponent)
        ("add", 2, lambda a, b: a + b, lambda a, b: a + b),
        ("sub", 2, lambda a, b: a - b * 0.5, lambda a, b: a - b * 0.5),
        ("mul", 2, lambda a, b: a * b.tanh(), lambda a, b: a * b.tanh()),
        ("div", 2, lambda a, b: a / (b * b + 1), lambda a, b: a / (b * b + 1)),
        (
            "tensor pow",
            2,
            lambda a, b: (a.tanh() ** 2 + 1) ** b,
            lambda a, b: (a.tanh() ** 2 + 1) ** b,
        ),
        ("maximum", 2, F.maximum, torch.maximum),
        ("minimum", 2, F.minimum, torch.minimum),
        # broadcasting through reductions
        (
            "x * mean(y)",
            2,
            lambda a, b: a * b.mean(axis=-1, keepdims=True).tanh(),
            lambda a, b: a * b.mean(-1, keepdim=True).tanh(),
        ),
        ("x + sum(y, 0)", 2, lambda a, b: a + b.sum(axis=0) * 0.3, lambda a, b: a + b.sum(0) * 0.3),
        (
            "x - max",
            1,
            lambda a: a - a.max(axis=1, keepdims=True).values,
            lambda a: a - a.amax(1, keepdim=True),
        ),
        (
            "x * min",
            2,
            lambda a, b: a * b.min(axis=(0, 2)).reshape(1, L, 1).tanh(),
            lambda a, b: a * b.amin((0, 2)).reshape(1, L, 1).tanh(),
        ),
        (
            "var",
            1,
            lambda a: a / (a.var(axis=-1, keepdims=True) + 1),
            lambda a: a / (a.var(-1, keepdim=True) + 1),
        ),
        (
            "std",
            1,
            lambda a: a / (1 + F.std(a, axis=(0, 1), unbiased=False)),
            lambda a: a / (1 + a.std((0, 1), unbiased=False)),
        ),
        (
            "std of equal elements",
            1,
            lambda a: a + a.clip(5, 6).std(axis=-1, keepdims=True),
            lambda a: a + a.clamp(5, 6).std(-1, keepdim=True),
        ),
        (
            "logsumexp",
            1,
            lambda a: a.logsumexp(axis=-1, keepdims=True) - a,
            lambda a: a.logsumexp(-1, keepdim=True) - a,
        ),
        # shape ops
        ("reshape∘mT", 1, lambda a: a.reshape(B, D, L).mT, lambda a: a.reshape(B, D, L).mT),
        (
            "permute",
            2,
            lambda a, b: a.permute(1, 0, 2).reshape(B, L, D) + b,
            lambda a, b: a.permute(1, 0, 2).reshape(B, L, D) + b,
        ),
        (
            "expand",
            1,
            lambda a: a.mean(axis=0, keepdims=True).expand(B, L, D).tanh() * a,
            lambda a: a.mean(0, keepdim=True).expand(B, L, D).tanh() * a,
        ),
        (
            "squeeze",
            1,
            lambda a: a.unsqueeze(1).squeeze(1).flatten(0, 1).reshape(B, L, D),
            lambda a: a.unsqueeze(1).squeeze(1).flatten(0, 1).reshape(B, L, D),
        ),
        (
            "concat∘split",
            2,
            lambda a, b: mt.concat(a.split([1, D - 1], axis=-1)[::-1], axis=-1) * b,
            lambda a, b: torch.cat(a.split([1, D - 1], dim=-1)[::-1], dim=-1) * b,
        ),
        (
            "stack",
            2,
            lambda a, b: mt.stack([a, b * 2], axis=1).mean(axis=1),
            lambda a, b: torch.stack([a, b * 2], dim=1).mean(1),
        ),
        (
            "chunk",
            1,
            lambda a: mt.concat(a.chunk(2, axis=-1)[::-1], axis=-1),
            lambda a: torch.cat(a.chunk(2, dim=-1)[::-1], dim=-1),
        ),
        ("getitem ints", 1, lambda a: a[:, perm] * 1.5, lambda a: a[:, t(perm)] * 1.5),
        (
            "getitem slices",
            1,
            lambda a: mt.concat([a[:, ::-1, :2], a[..., 2:]], axis=-1),
            lambda a: torch.cat([a.flip(1)[:, :, :2], a[..., 2:]], dim=-1),
        ),
        (
            "getitem mask",
            2,
            lambda a, b: a + b.sum(axis=0)[mask].sum(),
            lambda a, b: a + b.sum(0)[t(mask)].sum(),
        ),
        (
            "where",
            2,
            lambda a, b: mt.where(a > 0, a, b * 0.5),
            lambda a, b: torch.where(a > 0, a, b * 0.5),
        ),
        (
            "masked_fill",
            1,
            lambda a: a.masked_fill(mask, 0.25),
            lambda a: a.masked_fill(t(mask), 0.25),
        ),
        (
            "tril/triu",
            1,
            lambda a: a.tril() - a.triu(1) * 0.5,
            lambda a: a.tril() - a.triu(1) * 0.5,
        ),
        # matmul, 1-D to N-D
        (
            "x @ W",
            2,
            lambda a, b: a @ b[0, :, :].T.reshape(D, L)[:, :1].expand(D, D).tanh(),
            lambda a, b: a @ b[0, :, :].T.reshape(D, L)[:, :1].expand(D, D).tanh(),
        ),
        (
            "attention-like",
            2,
            lambda a, b: F.softmax(a @ b.mT, scale=0.5) @ b,
            lambda a, b: torch.softmax((a @ b.mT) * 0.5, -1) @ b,
        ),
        (
            "x @ v",
            2,
            lambda a, b: (a @ b[0, 0]).unsqueeze(-1).tanh() * a,
            lambda a, b: (a @ b[0, 0]).unsqueeze(-1).tanh() * a,
        ),
        (
            "v @ x",
            2,
            lambda a, b: (b[1, 1] @ a.mT).unsqueeze(-1).tanh() + a,
            lambda a, b: (b[1, 1] @ a.mT).unsqueeze(-1).tanh() + a,
        ),
        # neural-net functions
        ("softmax", 1, lambda a: F.softmax(a, axis=1), lambda a: torch.softmax(a, 1)),
        (
            "masked softmax",
            1,
            lambda a: F.softmax(a, mask=causal, scale=2.0),
            lambda a: torch.softmax((a * 2.0).masked_fill(t(causal), float("-inf")), -1),
        ),
        ("log_softmax", 1, F.log_softmax, lambda a: torch.log_softmax(a, -1)),
        (
            "layer_norm 2 axes",
            1,
            lambda a: F.layer_norm(a, (L, D)),
            lambda a: TF.layer_norm(a, (L, D)),
        ),
    ]


def _leaves(rng):
    """The same leaves in both libraries (float64)."""
    arrays = {
        "table": rng.standard_normal((V, D)),
        "x0": rng.standard_normal((B, L, D)),
        "y0": rng.standard_normal((B, L, D)),
        "W": rng.standard_normal((D, D)) * 0.5,
        "ln_w": 1 + 0.1 * rng.standard_normal(D),
        "ln_b": 0.1 * rng.standard_normal(D),
    }
    ours = {k: mt.tensor(v, dtype=mt.float64, requires_grad=True) for k, v in arrays.items()}
    theirs = {k: torch.tensor(v, requires_grad=True) for k, v in arrays.items()}
    return ours, theirs


def _run(seed, n_ops=12):
    """Build the same random program in both libraries; return both (loss, leaves, log)."""
    rng = np.random.default_rng(seed)
    ops = catalog(rng)
    ids = rng.integers(0, V, size=(B, L))
    targets = rng.integers(0, D, size=(B, L))
    targets[0, 1] = -100  # one ignored target
    picks = [(ops[rng.integers(len(ops))], rng.integers(0, 1000, size=2)) for _ in range(n_ops)]
    smoothing = float(rng.choice([0.0, 0.1]))
    weights = rng.standard_normal((n_ops, B, L, D))
    ours, theirs = _leaves(rng)
    results = []
    for lib, leaves in (("mt", ours), ("torch", theirs)):
        if lib == "mt":
            emb = F.embedding(mt.tensor(ids), leaves["table"])
            pool = [
                emb + leaves["x0"],
                F.layer_norm(leaves["y0"], D, leaves["ln_w"], leaves["ln_b"]) @ leaves["W"],
            ]
        else:
            emb = TF.embedding(torch.from_numpy(ids), leaves["table"])
            pool = [
                emb + leaves["x0"],
                TF.layer_norm(leaves["y0"], (D,), leaves["ln_w"], leaves["ln_b"]) @ leaves["W"],
            ]
        names = []
        for (name, arity, f_mt, f_torch), (i, _) in picks:
            fn = f_mt if lib == "mt" else f_torch
            args = [pool[-1], pool[i % len(pool)]][:arity]
            pool.append(fn(*args))
            names.append(name)
        w = [
            mt.tensor(wi, dtype=mt.float64) if lib == "mt" else torch.from_numpy(wi)
            for wi in weights
        ]
        side = pool[-1] * w[0]
        for k, p in enumerate(pool[2:-1], start=1):
            side = side + p * w[k]
        if lib == "mt":
            loss = (
                F.cross_entropy(
                    pool[-1].reshape(-1, D),
                    mt.tensor(targets).reshape(-1),
                    label_smoothing=smoothing,
                )
                + F.mse_loss(pool[-2], pool[0], reduction="sum") * 0.1
                + side.sum() * 0.01
            )
        else:
            loss = (
                TF.cross_entropy(
                    pool[-1].reshape(-1, D),
                    torch.from_numpy(targets).reshape(-1),
                    label_smoothing=smoothing,
                )
                + TF.mse_loss(pool[-2], pool[0], reduction="sum") * 0.1
                + side.sum() * 0.01
            )
        loss.backward()
        results.append((loss, leaves, names))
    return results


@pytest.mark.parametrize("seed", range(25))
def test_random_composite_expressions_match_torch(seed):
    (loss, ours, names), (loss_t, theirs, _) = _run(seed)
    where = f"program: {' → '.join(names)}"
    np.testing.assert_allclose(loss.item(), loss_t.item(), rtol=1e-9, err_msg=where)
    for key in ours:
        g, g_t = ours[key].grad, theirs[key].grad
        assert g is not None and g_t is not None, (key, where)
        np.testing.assert_allclose(
            g.numpy(), g_t.numpy(), rtol=1e-6, atol=1e-6, err_msg=f"grad of {key}; {where}"
        )


def test_every_op_of_the_catalog_is_exercised():
    used = {name for seed in range(25) for name in _run(seed, n_ops=12)[0][2]}
    assert used == {op[0] for op in catalog(np.random.default_rng(0))}


@pytest.mark.parametrize("name", [op[0] for op in catalog(np.random.default_rng(0))])
def test_each_op_alone_matches_torch(name):
    rng = np.random.default_rng(3)
    op = {o[0]: o for o in catalog(rng)}[name]
    _, arity, f_mt, f_torch = op
    arrays = [rng.standard_normal((B, L, D)) for _ in range(arity)]
    ours = [mt.tensor(a, dtype=mt.float64, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    w = rng.standard_normal((B, L, D))
    out, out_t = f_mt(*ours), f_torch(*theirs)
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=1e-9, atol=1e-12)
    (out * mt.tensor(w, dtype=mt.float64)).sum().backward()
    (out_t * torch.from_numpy(w)).sum().backward()
    for a, a_t in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), a_t.grad.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "shapes",
    [
        ((3,), (3,)),
        ((3,), (2, 3, 4)),
        ((2, 5, 3), (3,)),
        ((2, 1, 2, 3), (5, 3, 4)),
        ((4, 3), (3, 2)),
    ],
    ids=str,
)
def test_matmul_matches_torch(shapes):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(shapes[0]), rng.standard_normal(shapes[1])
    x, y = (
        mt.tensor(a, dtype=mt.float64, requires_grad=True),
        mt.tensor(b, dtype=mt.float64, requires_grad=True),
    )
    xt, yt = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (x @ y).sum().backward()
    (xt @ yt).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-9)
    np.testing.assert_allclose(y.grad.numpy(), yt.grad.numpy(), rtol=1e-9)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_matches_torch(reduction, smoothing):
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((2, 5, 6))
    targets = rng.integers(0, 6, size=(2, 5))
    targets[1, :3] = 0
    x = mt.tensor(logits, dtype=mt.float64, requires_grad=True)
    xt = torch.tensor(logits, requires_grad=True)
    out = F.cross_entropy(
        x.permute(0, 2, 1), targets, ignore_index=0, label_smoothing=smoothing, reduction=reduction
    )
    out_t = TF.cross_entropy(
        xt.permute(0, 2, 1),
        torch.from_numpy(targets),
        ignore_index=0,
        label_smoothing=smoothing,
        reduction=reduction,
    )
    np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), rtol=1e-9, atol=1e-12)
    w = rng.standard_normal(out.shape)
    (out * mt.tensor(w, dtype=mt.float64)).sum().backward()
    (out_t * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-6, atol=1e-9)
