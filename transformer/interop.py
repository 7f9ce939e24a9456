"""Move weights between our `Transformer` and PyTorch's `torch.nn.Transformer`.

torch is imported only inside these functions: minitensor never needs it to run.

`torch.nn.Transformer` is only the two stacks; a sequence model also needs embeddings,
positions and an output projection. `to_torch(model)` therefore returns a
`TorchSeq2Seq` module holding all of them — `src_embed`, `tgt_embed` (nn.Embedding), a `pe`
buffer (or learned `src_pos_embed`, `tgt_pos_embed`), `transformer` (nn.Transformer,
batch_first=True) and `generator` (nn.Linear) — whose
forward(src, tgt_in, src_padding_mask, tgt_padding_mask) computes what ours does.
`from_torch(model, torch_transformer, src_embedding, tgt_embedding, generator)` loads weights
the other way.

The name mapping (ours ← torch; N is the layer index; d = d_model):

    encoder.layers.N.self_attn.w_q.weight   ← encoder.layers.N.self_attn.in_proj_weight[0:d]
    encoder.layers.N.self_attn.w_k.weight   ← encoder.layers.N.self_attn.in_proj_weight[d:2d]
    encoder.layers.N.self_attn.w_v.weight   ← encoder.layers.N.self_attn.in_proj_weight[2d:3d]
        (biases likewise from in_proj_bias: torch stores W_q, W_k, W_v stacked in one matrix)
    encoder.layers.N.self_attn.w_o.*        ← encoder.layers.N.self_attn.out_proj.*
    encoder.layers.N.ffn.linear1.*          ← encoder.layers.N.linear1.*
    encoder.layers.N.ffn.linear2.*          ← encoder.layers.N.linear2.*
    encoder.layers.N.norm1/norm2.*          ← the same names
    decoder.layers.N.self_attn.*            ← decoder.layers.N.self_attn.* (split as above)
    decoder.layers.N.cross_attn.*           ← decoder.layers.N.multihead_attn.* (split as above)
    decoder.layers.N.norm1/norm2/norm3.*    ← the same names
    encoder.norm.*, decoder.norm.*          ← the same names (torch always has both; ours only
                                              when cfg.final_norm — the default)
    src_embed.token.weight                  ← the source nn.Embedding's weight
    tgt_embed.token.weight                  ← the target nn.Embedding's weight
    src_embed.position.weight (learned)     ← TorchSeq2Seq.src_pos_embed (tgt likewise)
    generator.*                             ← the output nn.Linear

Both store Linear weights as (out_features, in_features), so no matrix is transposed.
What torch's nn.Transformer cannot express: rotary positions, gated FFNs (swiglu/geglu) and
attention without the 1/√d_k scale — `to_torch` refuses those configurations.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .attention import MultiHeadAttention
from .config import TransformerConfig
from .embeddings import sinusoidal_table
from .models import Transformer


def _torch():
    import torch

    return torch


# ---------------------------------------------------------------------------- name mapping
def _attn_pairs(ours, theirs, d):
    """(our name, torch name, row slice or None) for one attention block."""
    pairs = []
    for i, w in enumerate(("w_q", "w_k", "w_v")):
        rows = slice(i * d, (i + 1) * d)
        pairs.append((f"{ours}.{w}.weight", f"{theirs}.in_proj_weight", rows))
        pairs.append((f"{ours}.{w}.bias", f"{theirs}.in_proj_bias", rows))
    pairs.append((f"{ours}.w_o.weight", f"{theirs}.out_proj.weight", None))
    pairs.append((f"{ours}.w_o.bias", f"{theirs}.out_proj.bias", None))
    return pairs


def _linear_pairs(ours, theirs):
    return [(f"{ours}.weight", f"{theirs}.weight", None), (f"{ours}.bias", f"{theirs}.bias", None)]


def stack_name_map(cfg: TransformerConfig, prefix: str = "") -> list[tuple[str, str, slice | None]]:
    """[(our name, torch nn.Transformer name, row slice or None), …] for every parameter of the
    two stacks. `prefix` is prepended to the torch names (e.g. "transformer.")."""
    d = cfg.d_model
    pairs = []
    for n in range(cfg.num_encoder_layers):
        o, t = f"encoder.layers.{n}", f"{prefix}encoder.layers.{n}"
        pairs += _attn_pairs(f"{o}.self_attn", f"{t}.self_attn", d)
        pairs += _linear_pairs(f"{o}.ffn.linear1", f"{t}.linear1")
        pairs += _linear_pairs(f"{o}.ffn.linear2", f"{t}.linear2")
        for norm in ("norm1", "norm2"):
            pairs += _linear_pairs(f"{o}.{norm}", f"{t}.{norm}")
    for n in range(cfg.num_decoder_layers):
        o, t = f"decoder.layers.{n}", f"{prefix}decoder.layers.{n}"
        pairs += _attn_pairs(f"{o}.self_attn", f"{t}.self_attn", d)
        pairs += _attn_pairs(f"{o}.cross_attn", f"{t}.multihead_attn", d)
        pairs += _linear_pairs(f"{o}.ffn.linear1", f"{t}.linear1")
        pairs += _linear_pairs(f"{o}.ffn.linear2", f"{t}.linear2")
        for norm in ("norm1", "norm2", "norm3"):
            pairs += _linear_pairs(f"{o}.{norm}", f"{t}.{norm}")
    if cfg.final_norm:
        pairs += _linear_pairs("encoder.norm", f"{prefix}encoder.norm")
        pairs += _linear_pairs("decoder.norm", f"{prefix}decoder.norm")
    return pairs


def _model_name_map(model):
    """Name map of a whole Transformer against a TorchSeq2Seq."""
    cfg = model.cfg
    pairs = stack_name_map(cfg, prefix="transformer.")
    pairs.append(("src_embed.token.weight", "src_embed.weight", None))
    pairs.append(("tgt_embed.token.weight", "tgt_embed.weight", None))
    if cfg.positional == "learned":
        pairs.append(("src_embed.position.weight", "src_pos_embed", None))
        pairs.append(("tgt_embed.position.weight", "tgt_pos_embed", None))
    if not cfg.tie_embeddings:
        pairs.append(("generator.weight", "generator.weight", None))
    pairs.append(("generator.bias", "generator.bias", None))
    return pairs


def _copy_into_ours(model, torch_state, pairs):
    state, loaded = model.state_dict(), {}
    for ours, theirs, rows in pairs:
        if theirs not in torch_state:
            raise KeyError(f"from_torch: torch weights have no {theirs!r} (needed for {ours!r})")
        arr = torch_state[theirs].detach().cpu().numpy()
        arr = arr[rows] if rows is not None else arr
        if arr.shape != state[ours].shape:
            raise ValueError(
                f"from_torch: {theirs} gives shape {arr.shape} but {ours} is {state[ours].shape}"
            )
        loaded[ours] = arr.astype(state[ours].dtype)
    # only the mapped names: a tied weight's other name (generator.weight) still holds the old
    # value in `state`, and the rest keep theirs anyway
    model.load_state_dict(loaded, strict=False)


def _copy_into_torch(module, our_state, pairs):
    torch = _torch()
    state = module.state_dict()
    for ours, theirs, rows in pairs:
        arr = torch.from_numpy(np.ascontiguousarray(our_state[ours])).to(state[theirs].dtype)
        if rows is None:
            state[theirs] = arr
        else:
            state[theirs] = state[theirs].clone()
            state[theirs][rows] = arr
    module.load_state_dict(state)


# ---------------------------------------------------------------------------- whole model
def _check_expressible(cfg):
    if callable(cfg.activation):
        from .config import activation_name

        raise ValueError(
            f"to_torch: a custom activation cannot be exported to "
            f"torch.nn.Transformer ({activation_name(cfg.activation)})"
        )
    if cfg.positional == "rotary":
        raise ValueError("to_torch: torch.nn.Transformer has no rotary positions")
    if cfg.activation in ("swiglu", "geglu"):
        raise ValueError(f"to_torch: torch.nn.Transformer has no gated FFN ({cfg.activation})")
    if not cfg.attention_scale:
        raise ValueError("to_torch: torch.nn.Transformer always scales scores by 1/sqrt(d_k)")


def _torch_transformer(cfg, dtype):
    """torch.nn.Transformer (batch_first) with cfg's sizes, activation, norms and dtype."""
    torch = _torch()
    act = {"relu": "relu", "gelu": "gelu", "silu": torch.nn.functional.silu}[cfg.activation]
    with warnings.catch_warnings():  # "enable_nested_tensor is True, but ...": we turn it off
        warnings.filterwarnings("ignore", message="enable_nested_tensor")
        transformer = torch.nn.Transformer(
            d_model=cfg.d_model,
            nhead=cfg.n_heads,
            num_encoder_layers=cfg.num_encoder_layers,
            num_decoder_layers=cfg.num_decoder_layers,
            dim_feedforward=cfg.d_ff,
            dropout=cfg.dropout,
            activation=act,
            layer_norm_eps=cfg.layer_norm_eps,
            batch_first=True,
            norm_first=cfg.norm_first,
            dtype=dtype,
        )
    # eval-mode "fast path" packs padded batches into nested tensors and returns zeros at <pad>
    # positions; turn it off so both models compute the same thing everywhere
    transformer.encoder.use_nested_tensor = False
    if not cfg.final_norm:
        transformer.encoder.norm = None
        transformer.decoder.norm = None
    return transformer


def _torch_seq2seq_class():
    torch = _torch()
    nn = torch.nn

    class TorchSeq2Seq(nn.Module):
        """PyTorch twin of `transformer.Transformer`: embeddings (· √d_model when scaled) +
        positions, nn.Transformer (batch_first), output Linear. Masks (B, L) bool, True = <pad>."""

        def __init__(self, cfg, dtype):
            super().__init__()
            self.cfg = cfg
            self.src_embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model, cfg.pad_id, dtype=dtype)
            self.tgt_embed = nn.Embedding(cfg.tgt_vocab_size, cfg.d_model, cfg.pad_id, dtype=dtype)
            self.scale = float(np.sqrt(cfg.d_model)) if cfg.scale_embeddings else 1.0
            self._add_positions(cfg, dtype)
            self.drop = nn.Dropout(cfg.dropout)
            self.transformer = _torch_transformer(cfg, dtype)
            self.generator = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, dtype=dtype)
            if cfg.tie_embeddings:
                self.generator.weight = self.tgt_embed.weight

        def _add_positions(self, cfg, dtype):
            """The sinusoidal table (a buffer) or the learned tables (parameters), if any."""
            if cfg.positional == "sinusoidal":
                self.register_buffer(
                    "pe", torch.tensor(sinusoidal_table(cfg.max_len, cfg.d_model)).to(dtype)
                )
            elif cfg.positional == "learned":
                shape = (cfg.max_len, cfg.d_model)
                self.src_pos_embed = nn.Parameter(torch.zeros(shape, dtype=dtype))
                self.tgt_pos_embed = nn.Parameter(torch.zeros(shape, dtype=dtype))

        def _embed(self, table, ids, pos):
            x = table(ids) * self.scale
            length = ids.shape[1]
            if self.cfg.positional == "sinusoidal":
                x = x + self.pe[:length]
            elif self.cfg.positional == "learned":
                x = x + pos[:length]
            return self.drop(x)

        def forward(self, src, tgt_in, src_padding_mask=None, tgt_padding_mask=None):
            pos_s = getattr(self, "src_pos_embed", None)
            pos_t = getattr(self, "tgt_pos_embed", None)
            length = tgt_in.shape[1]
            causal = torch.triu(torch.ones(length, length, dtype=torch.bool), diagonal=1)
            h = self.transformer(
                self._embed(self.src_embed, src, pos_s),
                self._embed(self.tgt_embed, tgt_in, pos_t),
                tgt_mask=causal,
                src_key_padding_mask=src_padding_mask,
                tgt_key_padding_mask=tgt_padding_mask,
                memory_key_padding_mask=src_padding_mask,
            )
            return self.generator(h)

    return TorchSeq2Seq


def to_torch(model: Transformer) -> Any:
    """A `TorchSeq2Seq` (torch.nn.Module) with our Transformer's weights, in the same dtype.

    It is in training mode like a fresh torch module; call .eval() to switch dropout off.
    """
    torch = _torch()
    cfg = model.cfg
    _check_expressible(cfg)
    state = model.state_dict()
    dtype = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64}[
        state["generator.bias"].dtype
    ]
    twin = _torch_seq2seq_class()(cfg, dtype)
    _copy_into_torch(twin, state, _model_name_map(model))
    return twin


def from_torch(
    model: Transformer,
    torch_transformer: Any,
    src_embedding: Any = None,
    tgt_embedding: Any = None,
    generator: Any = None,
) -> Transformer:
    """Load a torch.nn.Transformer's weights (and optionally its embeddings and output Linear)
    into our `Transformer` `model`, whose config must have the same sizes.

    torch_transformer may also be a `TorchSeq2Seq` from `to_torch` (then everything is loaded).
    The positional tables are not loaded (sinusoidal is fixed; learned ones come with a
    TorchSeq2Seq only).
    """
    cfg = model.cfg
    if hasattr(torch_transformer, "transformer") and hasattr(torch_transformer, "generator"):
        _copy_into_ours(model, torch_transformer.state_dict(), _model_name_map(model))
        return model
    tt = torch_transformer
    if cfg.final_norm != (tt.encoder.norm is not None):
        has = "has a" if tt.encoder.norm is not None else "has no"
        raise ValueError(
            f"from_torch: the torch encoder {has} final norm but cfg.final_norm={cfg.final_norm}"
        )
    pairs = stack_name_map(cfg)
    torch_state = dict(tt.state_dict())
    extra = [
        (src_embedding, "src_embed.token.weight", "weight"),
        (tgt_embedding, "tgt_embed.token.weight", "weight"),
    ]
    for mod, ours, attr in extra:
        if mod is not None:
            key = f"__{ours}"
            torch_state[key] = getattr(mod, attr)
            pairs.append((ours, key, None))
    if generator is not None:
        if not cfg.tie_embeddings:
            torch_state["__gen.w"] = generator.weight
            pairs.append(("generator.weight", "__gen.w", None))
        torch_state["__gen.b"] = generator.bias
        pairs.append(("generator.bias", "__gen.b", None))
    _copy_into_ours(model, torch_state, pairs)
    return model


# ---------------------------------------------------------------------------- one attention
def mha_to_torch(mha: MultiHeadAttention) -> Any:
    """A torch.nn.MultiheadAttention (batch_first=True) with our MultiHeadAttention's weights."""
    torch = _torch()
    w = mha.w_q.weight.numpy()
    dtype = torch.float64 if w.dtype == np.float64 else torch.float32
    twin = torch.nn.MultiheadAttention(
        mha.d_model, mha.n_heads, dropout=mha.dropout_p, batch_first=True, dtype=dtype
    )
    pairs = _attn_pairs("m", "m", mha.d_model)
    ours = {f"m.{k}": v for k, v in mha.state_dict().items()}
    wrapper = torch.nn.Module()
    wrapper.m = twin
    _copy_into_torch(wrapper, ours, pairs)
    return twin


def mha_from_torch(mha: MultiHeadAttention, torch_mha: Any) -> MultiHeadAttention:
    """Load a torch.nn.MultiheadAttention's weights (in_proj split into w_q, w_k, w_v)."""
    pairs = [(o[2:], t[2:], r) for o, t, r in _attn_pairs("m", "m", mha.d_model)]
    _copy_into_ours(mha, torch_mha.state_dict(), pairs)
    return mha
