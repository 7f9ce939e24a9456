"""nn.Transformer and its layers against torch's: the same program run under both libraries on
the same weights (torch's state_dict loaded with strict=True, and ours into torch), comparing
outputs, input gradients and every weight gradient in float64 — both norm orders, both
layouts, every mask form, each activation kind, the stacks with their final norm."""

import numpy as np
import pytest

import minitensor as mt

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.torch,
    # torch's notes about its own fast paths, which do not apply here
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning"),
    pytest.mark.filterwarnings("ignore:Support for mismatched:UserWarning"),
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning"),
]

D, H, FF = 8, 2, 16  # d_model, nhead, dim_feedforward: small, so float64 parity is tight
S, T, N = 5, 4, 3  # source length, target length, batch


def _to_lib(lib, a):
    return torch.from_numpy(np.array(a)) if lib is torch else mt.from_numpy(np.array(a))


def _numpy(t):
    return t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t.data)


def _twins(make):
    """make(lib) → a module of each library, ours holding torch's weights, both float64; and
    ours loaded back into a fresh torch module (strict=True both ways)."""
    torch.manual_seed(0)
    theirs = make(torch).double()
    ours = make(mt).double()
    ours.load_state_dict(theirs.state_dict(), strict=True)
    back = make(torch).double()
    back.load_state_dict({k: torch.from_numpy(v) for k, v in ours.state_dict().items()})
    for k, v in theirs.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k
    return ours, theirs


def _masks(lib, kinds, batch_first):
    """The forward's keyword arguments for `kinds`, built from fixed numpy arrays as `lib`
    tensors. No row is ever fully masked (torch gives NaN there, minitensor zeros)."""
    rng = np.random.default_rng(7)
    causal = np.triu(np.ones((T, T), bool), 1)
    pad_s = np.zeros((N, S), bool)
    pad_s[0, 3:], pad_s[2, 4] = True, True
    pad_t = np.zeros((N, T), bool)
    pad_t[1, 2:] = True
    options = {
        "tgt_bool": {"tgt_mask": causal},
        "tgt_float": {"tgt_mask": np.where(causal, -np.inf, 0.0), "tgt_is_causal": True},
        "src_float": {"src_mask": rng.standard_normal((S, S))},
        "src_3d": {"src_mask": (rng.random((N * H, S, S)) < 0.3) & ~np.eye(S, dtype=bool)},
        "memory": {"memory_mask": rng.standard_normal((T, S))},
        "padding": {
            "src_key_padding_mask": pad_s,
            "tgt_key_padding_mask": pad_t,
            "memory_key_padding_mask": pad_s,
        },
    }
    kw = {}
    for kind in kinds:
        kw.update(options[kind])
    return {k: v if isinstance(v, bool) else _to_lib(lib, v) for k, v in kw.items()}


def _inputs(lib, batch_first, *lengths):
    rng = np.random.default_rng(3)
    shapes = [(N, n, D) if batch_first else (n, N, D) for n in lengths]
    return [_to_lib(lib, rng.standard_normal(s)).requires_grad_() for s in shapes]


def _backward(out):
    """A loss whose gradient differs at every output element."""
    w = np.random.default_rng(11).standard_normal(tuple(out.shape))
    (out * _to_lib(torch if isinstance(out, torch.Tensor) else mt, w)).sum().backward()


def _compare(ours, theirs, out, ref, inputs, ref_inputs, tol=1e-10):
    np.testing.assert_allclose(_numpy(out), _numpy(ref), atol=tol, rtol=1e-9)
    for x, rx in zip(inputs, ref_inputs):
        np.testing.assert_allclose(_numpy(x.grad), _numpy(rx.grad), atol=tol, rtol=1e-9)
    grads = {n: p.grad for n, p in theirs.named_parameters()}
    assert [n for n, _ in ours.named_parameters()] == list(grads)
    for n, p in ours.named_parameters():
        np.testing.assert_allclose(_numpy(p.grad), _numpy(grads[n]), atol=tol, rtol=1e-9, err_msg=n)


def _activation(lib, kind):
    return {
        "relu": "relu",
        "gelu": "gelu",
        "function": lambda: lib.nn.functional.silu,
        "module": lambda: lib.nn.GELU(approximate="tanh"),
        "F.gelu": lambda: lib.nn.functional.gelu,
    }[kind]


def _act(lib, kind):
    a = _activation(lib, kind)
    return a if isinstance(a, str) else a()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu", "function", "module"])
def test_encoder_layer_matches_torch(norm_first, batch_first, activation):
    def make(lib):
        return lib.nn.TransformerEncoderLayer(
            D, H, FF, 0.0, _act(lib, activation), batch_first=batch_first, norm_first=norm_first
        )

    ours, theirs = _twins(make)
    results = []
    for lib, model in ((mt, ours), (torch, theirs)):
        (src,) = _inputs(lib, batch_first, S)
        kw = _masks(lib, ["src_float", "padding"], batch_first)
        out = model(src, src_key_padding_mask=kw["src_key_padding_mask"], src_mask=kw["src_mask"])
        _backward(out)
        results.append((out, [src]))
    _compare(ours, theirs, results[0][0], results[1][0], results[0][1], results[1][1])


MASKS = [[], ["tgt_bool"], ["tgt_float"], ["src_float"], ["src_3d"], ["memory"], ["padding"]]
MASKS += [["tgt_float", "src_3d", "memory", "padding"]]


@pytest.mark.parametrize("kinds", MASKS, ids=lambda k: "+".join(k) or "none")
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_matches_torch(kinds, norm_first, batch_first):
    def make(lib):
        return lib.nn.Transformer(
            D, H, 2, 2, FF, 0.0, batch_first=batch_first, norm_first=norm_first
        )

    ours, theirs = _twins(make)
    results = []
    for lib, model in ((mt, ours), (torch, theirs)):
        src, tgt = _inputs(lib, batch_first, S, T)
        out = model(src, tgt, **_masks(lib, kinds, batch_first))
        _backward(out)
        results.append((out, [src, tgt]))
    _compare(ours, theirs, results[0][0], results[1][0], results[0][1], results[1][1])


@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_with_a_final_norm_match_torch(norm_first):
    """TransformerEncoder(layer, 2, norm=LayerNorm) and TransformerDecoder likewise, called
    as tutorials do (masks by keyword, is_causal hints, the causal mask torch generates)."""

    def make(lib):
        enc = lib.nn.TransformerEncoderLayer(D, H, FF, 0.0, "gelu", norm_first=norm_first)
        dec = lib.nn.TransformerDecoderLayer(D, H, FF, 0.0, norm_first=norm_first)
        return lib.nn.ModuleDict(
            {
                "encoder": lib.nn.TransformerEncoder(enc, 2, norm=lib.nn.LayerNorm(D)),
                "decoder": lib.nn.TransformerDecoder(dec, 2, norm=lib.nn.LayerNorm(D)),
            }
        )

    ours, theirs = _twins(make)
    results = []
    for lib, model in ((mt, ours), (torch, theirs)):
        src, tgt = _inputs(lib, False, S, T)
        causal = lib.nn.Transformer.generate_square_subsequent_mask(S, dtype=lib.float64)
        memory = model["encoder"](src, mask=causal, is_causal=True)
        pad = _masks(lib, ["padding"], False)
        out = model["decoder"](
            tgt,
            memory,
            tgt_mask=lib.nn.Transformer.generate_square_subsequent_mask(T, dtype=lib.float64),
            tgt_is_causal=True,
            memory_key_padding_mask=pad["memory_key_padding_mask"],
        )
        _backward(out)
        results.append((out, [src, tgt]))
    _compare(ours, theirs, results[0][0], results[1][0], results[0][1], results[1][1])


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_unbatched_matches_torch(norm_first):
    def make(lib):
        return lib.nn.TransformerDecoderLayer(D, H, FF, 0.0, norm_first=norm_first, bias=False)

    ours, theirs = _twins(make)
    assert "norm1.bias" not in ours.state_dict()
    results = []
    for lib, model in ((mt, ours), (torch, theirs)):
        rng = np.random.default_rng(5)
        tgt = _to_lib(lib, rng.standard_normal((T, D))).requires_grad_()
        mem = _to_lib(lib, rng.standard_normal((S, D))).requires_grad_()
        out = model(tgt, mem, tgt_mask=_to_lib(lib, np.triu(np.ones((T, T), bool), 1)))
        _backward(out)
        results.append((out, [tgt, mem]))
    _compare(ours, theirs, results[0][0], results[1][0], results[0][1], results[1][1])


def test_generate_square_subsequent_mask_is_torchs():
    for kw in ({}, {"dtype": "float64"}):
        ours = mt.nn.Transformer.generate_square_subsequent_mask(4, **kw)
        dtype = {"dtype": getattr(torch, kw["dtype"])} if kw else {}
        ref = torch.nn.Transformer.generate_square_subsequent_mask(4, **dtype)
        assert str(ours.dtype) == str(ref.dtype).removeprefix("torch.")
        np.testing.assert_array_equal(_numpy(ours), ref.numpy())


def test_defaults_and_attributes_are_torchs():
    for lib in (mt, torch):
        model = lib.nn.Transformer(d_model=16, nhead=4, num_encoder_layers=1)
        layer = model.encoder.layers[0]
        assert (model.d_model, model.nhead, model.batch_first) == (16, 4, False)
        assert len(model.decoder.layers) == 6 and model.decoder.num_layers == 6
        assert layer.linear1.out_features == 2048 and layer.dropout.p == 0.1
        assert layer.norm1.eps == 1e-5 and layer.norm_first is False
        assert layer.activation is lib.nn.functional.relu
    ours = {k: v.shape for k, v in mt.nn.Transformer(16, 4, 1, 1, 32).state_dict().items()}
    ref = {k: tuple(v.shape) for k, v in torch.nn.Transformer(16, 4, 1, 1, 32).state_dict().items()}
    assert ours == ref


def test_initialisation_is_torchs():
    """Transformer re-draws every matrix Xavier-uniform (so its layers differ); the stacks
    alone copy one layer, so theirs start equal — in both libraries."""
    for lib in (mt, torch):
        model = lib.nn.Transformer(16, 4, 2, 2, 32)
        w0, w1 = (_numpy(m.linear1.weight) for m in model.encoder.layers)
        assert not np.array_equal(w0, w1)
        bound = np.sqrt(6 / (16 + 32))
        assert np.abs(w0).max() <= bound and np.abs(w0).max() > 0.9 * bound
        enc = lib.nn.TransformerEncoder(lib.nn.TransformerEncoderLayer(16, 4, 32), 2)
        w0, w1 = (_numpy(m.linear1.weight) for m in enc.layers)
        assert np.array_equal(w0, w1)
        assert enc.layers[0].linear1.weight is not enc.layers[1].linear1.weight


def test_dropout_applies_in_training_only():
    layer = mt.nn.TransformerEncoderLayer(D, H, FF, dropout=0.5)
    x = mt.randn(S, N, D)
    assert not np.allclose(layer(x).numpy(), layer(x).numpy())
    layer.eval()
    np.testing.assert_array_equal(layer(x).numpy(), layer(x).numpy())


def test_errors_are_torchs():
    for lib in (mt, torch):
        with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
            lib.nn.TransformerEncoderLayer(D, H, activation="tanh")
        model = lib.nn.Transformer(D, H, 1, 1, FF)
        with pytest.raises(RuntimeError, match="batch number of src"):
            model(lib.zeros(S, 2, D), lib.zeros(T, 3, D))
        with pytest.raises(RuntimeError, match="feature number of src.*must be equal to d_model"):
            model(lib.zeros(S, N, D), lib.zeros(T, N, D + 1))
        layer = lib.nn.TransformerEncoderLayer(D, H, FF)
        with pytest.raises(RuntimeError, match="Need attn_mask"):
            layer(lib.zeros(S, N, D), is_causal=True)


def test_custom_stacks_eps_bias_and_dtype_match_torch():
    """custom_encoder / custom_decoder, layer_norm_eps, bias=False and dtype= as torch's."""

    def make(lib):
        enc = lib.nn.TransformerEncoder(
            lib.nn.TransformerEncoderLayer(D, H, FF, 0.0, layer_norm_eps=1e-3, bias=False),
            1,
            enable_nested_tensor=False,
        )
        return lib.nn.Transformer(
            D,
            H,
            dim_feedforward=FF,
            num_decoder_layers=1,
            dropout=0.0,
            custom_encoder=enc,
            layer_norm_eps=1e-3,
            bias=False,
            dtype=lib.float64,
        )

    ours, theirs = _twins(make)
    assert ours.encoder.norm is None and ours.decoder.layers[0].norm1.eps == 1e-3
    assert all(p.dtype == mt.float64 for p in make(mt).decoder.parameters())
    results = []
    for lib, model in ((mt, ours), (torch, theirs)):
        src, tgt = _inputs(lib, False, S, T)
        out = model(src, tgt, **_masks(lib, ["tgt_float", "padding"], False))
        _backward(out)
        results.append((out, [src, tgt]))
    _compare(ours, theirs, results[0][0], results[1][0], results[0][1], results[1][1])


def test_inference_matches_torchs_fast_path():
    """In eval mode without grad torch runs its fused fast path (nested tensors for padded
    batches): the same numbers in float32 — except at padded positions, which that path
    writes as 0 and the plain layers (torch's in training, and ours) compute."""

    def make(lib):
        layer = lib.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True)
        return lib.nn.TransformerEncoder(layer, 2).eval()

    torch.manual_seed(0)
    theirs, ours = make(torch), make(mt)
    ours.load_state_dict(theirs.state_dict())
    x = np.random.default_rng(0).standard_normal((3, 5, 16)).astype(np.float32)
    pad = np.zeros((3, 5), bool)
    pad[0, 3:] = True
    with torch.no_grad(), mt.no_grad():
        for mask in (None, pad):
            ref = theirs(torch.from_numpy(x), src_key_padding_mask=_maybe(torch, mask))
            out = ours(mt.from_numpy(x), src_key_padding_mask=_maybe(mt, mask))
            keep = ~pad if mask is not None else np.ones((3, 5), bool)
            np.testing.assert_allclose(_numpy(out)[keep], ref.numpy()[keep], atol=1e-5)
    assert not ref.numpy()[pad].any() and _numpy(out)[pad].all()


def _maybe(lib, mask):
    return None if mask is None else _to_lib(lib, mask)
