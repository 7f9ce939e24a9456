"""Layers and models: names from the paper, shapes, Post-/Pre-Norm, activations, positions,
the three model shapes, attention maps and score stats, and float64 gradchecks."""

import math

import numpy as np
import pytest

import minitensor as mt
import minitensor.functional as F
from transformer import DecoderOnlyLM, EncoderOnly, Transformer, TransformerConfig
from transformer import masks as M
from transformer.embeddings import sinusoidal_table
from transformer.layers import DecoderLayer, EncoderLayer, FeedForward


# ---------------------------------------------------------------------------- config
def test_config_presets_and_validation():
    paper = TransformerConfig.paper(100, 200)
    assert (
        paper.d_model,
        paper.n_heads,
        paper.num_encoder_layers,
        paper.num_decoder_layers,
        paper.d_ff,
        paper.d_k,
    ) == (512, 8, 6, 6, 2048, 64)
    small = TransformerConfig.small(14, 14)
    assert (small.d_model, small.n_heads, small.num_encoder_layers, small.d_ff) == (128, 4, 2, 512)
    assert small.replace(positional="none").positional == "none"
    with pytest.raises(ValueError, match="multiple of n_heads"):
        TransformerConfig(10, 10, d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="activation"):
        TransformerConfig(10, 10, activation="tanh")
    with pytest.raises(ValueError, match="positional"):
        TransformerConfig(10, 10, positional="alibi")


# ---------------------------------------------------------------------------- names and shapes
def test_parameter_names_follow_the_paper():
    model = Transformer(TransformerConfig.tiny(7, 9))
    names = {n for n, _ in model.named_parameters()}
    for expected in [
        "src_embed.token.weight",
        "tgt_embed.token.weight",
        "encoder.layers.0.self_attn.w_q.weight",
        "encoder.layers.0.self_attn.w_o.bias",
        "encoder.layers.0.ffn.linear1.weight",
        "encoder.layers.0.ffn.linear2.bias",
        "encoder.layers.0.norm1.weight",
        "encoder.layers.0.norm2.bias",
        "decoder.layers.0.self_attn.w_k.weight",
        "decoder.layers.0.cross_attn.w_v.weight",
        "decoder.layers.0.norm3.weight",
        "encoder.norm.weight",
        "decoder.norm.bias",
        "generator.weight",
        "generator.bias",
    ]:
        assert expected in names, expected
    assert (
        model.decoder.layers[0].cross_attn.w_q.weight.name
        == "decoder.layers.0.cross_attn.w_q.weight"
    )
    no_final = Transformer(TransformerConfig.tiny(7, 9, final_norm=False))
    assert "encoder.norm.weight" not in {n for n, _ in no_final.named_parameters()}


def test_ops_record_the_module_scope():
    model = Transformer(TransformerConfig.tiny(7, 9))
    logits = model(np.array([[1, 2, 3]]), np.array([[1, 4]]))
    scopes, stack, seen = set(), [logits.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        scopes.add(node.scope)
        stack.extend(node.parents)
    for s in [
        "decoder.layers.0.cross_attn",
        "encoder.layers.0.self_attn",
        "encoder.layers.0.ffn",
        "decoder.layers.0.norm3",
        "generator",
        "src_embed.token",
    ]:
        assert s in scopes, (s, sorted(scopes))


def test_forward_shapes_and_attention_maps(rng):
    model = Transformer(TransformerConfig.tiny(7, 9, num_encoder_layers=2))
    src, tgt = rng.integers(1, 7, (3, 5)), rng.integers(1, 9, (3, 4))
    logits = model(src, tgt)
    assert logits.shape == (3, 4, 9)
    assert model.encode(src).shape == (3, 5, 16)
    maps = model.attention_maps()
    assert set(maps) == {
        "encoder.layers.0.self_attn",
        "encoder.layers.1.self_attn",
        "decoder.layers.0.self_attn",
        "decoder.layers.0.cross_attn",
    }
    assert maps["decoder.layers.0.cross_attn"].shape == (3, 2, 4, 5)  # (L_tgt, L_src)
    assert maps["decoder.layers.0.self_attn"].shape == (3, 2, 4, 4)
    np.testing.assert_allclose(maps["encoder.layers.1.self_attn"].sum(-1), 1.0, rtol=1e-5)
    causal = maps["decoder.layers.0.self_attn"]
    assert np.all(causal[..., M.causal_mask(4)] == 0)
    maps["encoder.layers.0.self_attn"][:] = 7.0  # copies: the model's record is unchanged
    assert not np.any(model.attention_maps()["encoder.layers.0.self_attn"] == 7.0)
    stats = model.score_stats()
    assert set(stats) == set(maps)
    assert stats["encoder.layers.0.self_attn"]["max_abs_score"] > 0


def test_model_input_errors():
    model = Transformer(TransformerConfig.tiny(7, 9, max_len=8))
    with pytest.raises(ValueError, match="batch, length"):
        model(np.array([1, 2, 3]), np.array([[1, 2]]))
    with pytest.raises(ValueError, match="max_len=8"):
        model(np.ones((1, 9), dtype=np.int64), np.ones((1, 2), dtype=np.int64))
    with pytest.raises(TypeError, match="from_allowed_mask"):
        model(
            np.ones((1, 3), dtype=np.int64),
            np.ones((1, 2), dtype=np.int64),
            np.ones((1, 3), dtype=np.int64),
        )
    with pytest.raises(ValueError, match="does not match"):
        model(
            np.ones((1, 3), dtype=np.int64),
            np.ones((1, 2), dtype=np.int64),
            np.zeros((1, 4), dtype=bool),
        )


# ---------------------------------------------------------------------------- pieces
def test_sinusoidal_table_is_the_papers_formula():
    pe = sinusoidal_table(50, 8)
    for pos in (0, 3, 49):
        for i in range(4):
            angle = pos / 10000 ** (2 * i / 8)
            assert pe[pos, 2 * i] == pytest.approx(math.sin(angle))
            assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(angle))
    assert np.abs(pe).max() <= 1.0


def test_embedding_scale_and_its_initialisation():
    scaled = Transformer(
        TransformerConfig.tiny(50, 9, d_model=64, n_heads=4, scale_embeddings=True)
    )
    plain = Transformer(
        TransformerConfig.tiny(50, 9, d_model=64, n_heads=4, scale_embeddings=False)
    )
    # scaled: E·√d is N(0, 1), on the scale of the positions; plain: E is N(0, 1)
    e = scaled.src_embed.token.weight.numpy()[1:]
    assert 0.8 < e.std() * 8 < 1.2
    assert 0.8 < plain.src_embed.token.weight.numpy()[1:].std() < 1.2
    assert np.all(scaled.src_embed.token.weight.numpy()[0] == 0)  # <pad> row
    ids = np.array([[3]])
    out = scaled.src_embed.token(ids).numpy()
    np.testing.assert_allclose(out[0, 0], scaled.src_embed.token.weight.numpy()[3] * 8, rtol=1e-6)


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu", "swiglu", "geglu"])
def test_feed_forward_activations(rng, activation):
    ffn = FeedForward(8, 16, activation=activation).double()
    assert hasattr(ffn, "linear_gate") == (activation in ("swiglu", "geglu"))
    x = rng.standard_normal((2, 3, 8))
    out = ffn(mt.tensor(x, dtype=mt.float64)).numpy()
    w1, b1 = ffn.linear1.weight.numpy(), ffn.linear1.bias.numpy()
    w2, b2 = ffn.linear2.weight.numpy(), ffn.linear2.bias.numpy()
    h = x @ w1.T + b1
    act = {
        "relu": lambda z: np.maximum(z, 0),
        "silu": lambda z: z / (1 + np.exp(-z)),
        "gelu": lambda z: 0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2))),
    }
    if activation in ("swiglu", "geglu"):
        g = x @ ffn.linear_gate.weight.numpy().T + ffn.linear_gate.bias.numpy()
        h = act["silu" if activation == "swiglu" else "gelu"](g) * h
    else:
        h = act[activation](h)
    np.testing.assert_allclose(out, h @ w2.T + b2, rtol=1e-10, atol=1e-12)


def test_post_norm_output_is_normalised_pre_norm_is_not(rng):
    x = mt.tensor(rng.standard_normal((2, 4, 16)) * 3 + 1)
    post = EncoderLayer(TransformerConfig.tiny(5, 5, norm_first=False))(x).numpy()
    pre = EncoderLayer(TransformerConfig.tiny(5, 5, norm_first=True))(x).numpy()
    np.testing.assert_allclose(post.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(post.std(-1), 1, atol=1e-3)
    assert np.abs(pre.std(-1) - 1).max() > 0.1


def test_no_positions_make_the_encoder_blind_to_order(rng):
    """The seed's ablation: without positional encoding, permuting the source permutes the
    memory — attention alone cannot see order."""
    src = rng.integers(1, 9, (1, 5))
    perm = np.array([3, 0, 4, 1, 2])
    blind = Transformer(TransformerConfig.tiny(9, 9, positional="none")).eval()
    np.testing.assert_allclose(
        blind.encode(src[:, perm]).numpy(), blind.encode(src).numpy()[:, perm], rtol=1e-5, atol=1e-6
    )
    for positional in ("sinusoidal", "learned", "rotary"):
        seeing = Transformer(TransformerConfig.tiny(9, 9, positional=positional)).eval()
        assert not np.allclose(
            seeing.encode(src[:, perm]).numpy(), seeing.encode(src).numpy()[:, perm], atol=1e-4
        ), positional


def test_tied_embeddings_share_one_parameter():
    cfg = TransformerConfig.tiny(9, 9)
    tied = Transformer(cfg.replace(tie_embeddings=True))
    untied = Transformer(cfg)
    assert tied.generator.weight is tied.tgt_embed.token.weight
    assert untied.num_parameters() - tied.num_parameters() == 9 * 16
    lm = DecoderOnlyLM(TransformerConfig.tiny(0, 9, tie_embeddings=True))
    assert lm.generator.weight is lm.tgt_embed.token.weight


def test_encoder_only_heads(rng):
    ids = rng.integers(1, 9, (2, 5))
    ids[0, 3:] = 0
    cls = EncoderOnly(TransformerConfig.tiny(9, 0), num_classes=3)
    assert cls(ids, M.padding_mask(ids, 0)).shape == (2, 3)
    first = EncoderOnly(TransformerConfig.tiny(9, 0), num_classes=3, pooling="first")
    assert first(ids).shape == (2, 3)
    mlm = EncoderOnly(TransformerConfig.tiny(9, 0))
    logits = mlm(ids, M.padding_mask(ids, 0))
    assert logits.shape == (2, 5, 9)
    F.cross_entropy(logits.transpose(1, 2), ids, ignore_index=0).backward()
    assert mlm.encoder.layers[0].self_attn.w_q.weight.grad is not None


def test_decoder_only_lm_has_no_cross_attention(rng):
    lm = DecoderOnlyLM(TransformerConfig.tiny(0, 11, num_decoder_layers=2))
    names = {n for n, _ in lm.named_parameters()}
    assert not any("cross_attn" in n for n in names)
    assert "decoder.layers.1.norm2.weight" in names and "decoder.layers.1.norm3.weight" not in names
    ids = rng.integers(1, 11, (2, 6))
    assert lm(ids).shape == (2, 6, 11)


# ---------------------------------------------------------------------------- gradchecks
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_gradcheck(leaf, norm_first):
    cfg = TransformerConfig.tiny(5, 5, d_model=4, d_ff=6, norm_first=norm_first)
    layer = EncoderLayer(cfg).double()
    x = leaf(2, 3, 4)
    mask = M.combine_masks(np.array([[False, False, True], [False, False, False]]))
    params = [
        layer.self_attn.w_v.weight,
        layer.ffn.linear1.bias,
        layer.norm1.weight,
        layer.norm2.bias,
        layer.ffn.linear2.weight,
    ]
    assert mt.gradcheck(lambda x, *ps: layer(x, mask), x, *params)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_gradcheck(leaf, norm_first):
    layer = DecoderLayer(
        TransformerConfig.tiny(5, 5, d_model=4, d_ff=6, norm_first=norm_first, activation="swiglu")
    ).double()
    x, memory = leaf(2, 3, 4), leaf(2, 4, 4)
    self_mask = M.combine_masks(np.array([[False, False, True], [False] * 3]), M.causal_mask(3))
    cross_mask = M.combine_masks(np.array([[False] * 3 + [True], [False] * 4]))
    params = [
        layer.cross_attn.w_q.weight,
        layer.self_attn.w_o.bias,
        layer.norm3.weight,
        layer.ffn.linear_gate.weight,
    ]
    assert mt.gradcheck(lambda x, m, *ps: layer(x, m, self_mask, cross_mask), x, memory, *params)


@pytest.mark.parametrize("positional", ["sinusoidal", "rotary", "learned"])
def test_tiny_full_model_gradcheck(rng, positional):
    cfg = TransformerConfig.tiny(6, 7, d_model=4, d_ff=6, positional=positional, max_len=6)
    model = Transformer(cfg).double()
    src = rng.integers(0, 6, (2, 4))
    src[0, 0] = 1
    tgt_in, tgt_out = rng.integers(1, 7, (2, 3)), rng.integers(0, 7, (2, 3))
    spm, tpm = M.padding_mask(src, 0), M.padding_mask(tgt_in, 0)

    def loss(*ps):
        logits = model(src, tgt_in, spm, tpm)
        return F.cross_entropy(logits.transpose(1, 2), tgt_out, ignore_index=0, label_smoothing=0.1)

    params = [
        model.src_embed.token.weight,
        model.encoder.layers[0].self_attn.w_k.weight,
        model.decoder.layers[0].cross_attn.w_v.weight,
        model.decoder.norm.weight,
        model.generator.bias,
    ]
    if positional == "learned":
        params.append(model.tgt_embed.position.weight)
    assert mt.gradcheck(loss, *params)


def test_layers_ask_for_no_weights_so_long_sequences_run_fused(rng):
    # the layers use only the attention output (need_weights=False, as torch's layers): from
    # FUSED_MIN_KEYS keys on the fused op runs, and the maps are recomputed when asked for
    from minitensor.ops.attention import FUSED_MIN_KEYS

    L = FUSED_MIN_KEYS + 3
    cfg = TransformerConfig.tiny(7, 9, num_encoder_layers=1, num_decoder_layers=1, max_len=L)
    model = Transformer(cfg).eval()
    src, tgt = rng.integers(1, 7, (2, L)), rng.integers(1, 9, (2, L))
    model(src, tgt)
    attn = model.encoder.layers[0].self_attn
    assert attn._record[0] is None  # fused: no (L, L) weights were built
    maps = model.attention_maps()
    w = maps["encoder.layers.0.self_attn"]
    assert w.shape == (2, cfg.n_heads, L, L) and maps["decoder.layers.0.cross_attn"].shape[-1] == L
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-5)
    # the recomputed weights are the explicit path's weights
    x = mt.tensor(rng.standard_normal((2, L, cfg.d_model)), dtype=mt.float32)
    layer = EncoderLayer(cfg).eval()
    layer(x)
    fused_w = layer.self_attn.last_weights
    explicit_w = (
        layer.self_attn(x, need_weights=True)[1].numpy()
        if not cfg.norm_first
        else layer.self_attn(layer.norm1(x), need_weights=True)[1].numpy()
    )
    np.testing.assert_allclose(fused_w, explicit_w, rtol=1e-5, atol=1e-6)


SRC_V, TGT_V = 10, 12


def _cfg(**kw):
    return TransformerConfig.tiny(SRC_V, TGT_V, num_encoder_layers=1, num_decoder_layers=2, **kw)


def _ids(rng, batch, length, vocab=SRC_V):
    return rng.integers(3, vocab, (batch, length))


# ---------------------------------------------------------------------------- models
@pytest.mark.parametrize("batch, l_src, l_tgt", [(0, 6, 5), (3, 6, 0), (3, 0, 5), (0, 0, 0)])
def test_transformer_on_empty_axes_matches_torch_shapes(rng, batch, l_src, l_tgt):
    torch = pytest.importorskip("torch")
    model = Transformer(_cfg())
    src, tgt = _ids(rng, batch, l_src), _ids(rng, batch, l_tgt, TGT_V)
    logits = model(
        src,
        tgt,
        src_padding_mask=np.zeros(src.shape, bool),
        tgt_padding_mask=np.zeros(tgt.shape, bool),
    )
    reference = torch.nn.Transformer(
        d_model=16,
        nhead=2,
        num_encoder_layers=1,
        num_decoder_layers=2,
        dim_feedforward=32,
        dropout=0.0,
        batch_first=True,
    )
    out = reference(torch.zeros(batch, l_src, 16), torch.zeros(batch, l_tgt, 16))
    assert logits.shape == tuple(out.shape[:2]) + (TGT_V,)
    assert np.isfinite(logits.numpy()).all()


@pytest.mark.parametrize("batch, l_src, l_tgt", [(0, 6, 5), (3, 6, 0), (3, 0, 5)])
def test_transformer_on_empty_axes_runs_backward(rng, batch, l_src, l_tgt):
    model = Transformer(_cfg())
    logits = model(_ids(rng, batch, l_src), _ids(rng, batch, l_tgt, TGT_V))
    logits.sum().backward()  # as torch: gradients of an empty output
    grad = model.generator.weight.grad.numpy()
    assert grad.shape == (TGT_V, 16)
    assert np.isfinite(grad).all() and (grad.any() == (batch > 0 and l_tgt > 0))


def test_decoder_only_and_encoder_only_on_empty_axes(rng):
    lm = DecoderOnlyLM(TransformerConfig.tiny(0, TGT_V, num_decoder_layers=1))
    assert lm(_ids(rng, 0, 4, TGT_V)).shape == (0, 4, TGT_V)
    assert lm(_ids(rng, 2, 0, TGT_V)).shape == (2, 0, TGT_V)
    cache = lm.new_cache()
    assert lm(_ids(rng, 0, 3, TGT_V), cache=cache).shape == (0, 3, TGT_V) and len(cache) == 3
    tagger = EncoderOnly(_cfg())  # a masked-token head: logits per position
    assert tagger(_ids(rng, 0, 5)).shape == (0, 5, SRC_V)
    assert tagger(_ids(rng, 2, 0)).shape == (2, 0, SRC_V)
    classifier = EncoderOnly(_cfg(), num_classes=3)
    assert classifier(_ids(rng, 0, 5)).shape == (0, 3)
