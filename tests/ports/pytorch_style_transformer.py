"""A small encoder-decoder Transformer written the way PyTorch tutorials write it.

This file is PyTorch code: it imports `torch` and nothing of minitensor. tests/ports/test_pytorch_style.py
runs it twice — once with the real torch, once with `torch`, `torch.nn`, `torch.nn.functional`
and `torch.optim` bound to minitensor's modules — and checks that both give the same numbers on
the same weights. Whatever minitensor lacks shows up there as a failure of this file.

The idioms it uses on purpose: nn.ModuleList of deep-copied layers, a positional table made with
torch.sin/torch.cos and kept by register_buffer, x.size(-1), .view/.contiguous(),
masked_fill(mask == 0, -1e9), F.softmax(scores, dim=-1), mean/std with keepdim=True,
torch.tril for the causal mask, and optionally nn.MultiheadAttention for cross-attention.
"""

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def clones(module, n):
    """n independent copies of a layer."""
    return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=64):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1).float()
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return x + self.pe[:, : x.size(1)]


class LayerNorm(nn.Module):
    """The hand-written norm many tutorials use (std, not the biased variance)."""

    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(features))
        self.beta = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.gamma * (x - mean) / (std + self.eps) + self.beta


def attention(query, key, value, mask=None, dropout=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = F.softmax(scores, dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


class MultiHeadAttention(nn.Module):
    def __init__(self, n_heads, d_model, dropout=0.0):
        super().__init__()
        assert d_model % n_heads == 0
        self.d_k = d_model // n_heads
        self.h = n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.attn = None

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)  # the same mask for every head
        batch = query.size(0)
        q = self.w_q(query).view(batch, -1, self.h, self.d_k).transpose(1, 2)
        k = self.w_k(key).view(batch, -1, self.h, self.d_k).transpose(1, 2)
        v = self.w_v(value).view(batch, -1, self.h, self.d_k).transpose(1, 2)
        x, self.attn = attention(q, k, v, mask=mask, dropout=self.dropout)
        x = x.transpose(1, 2).contiguous().view(batch, -1, self.h * self.d_k)
        return self.w_o(x)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(F.relu(self.linear1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, self_attn, feed_forward, dropout=0.0):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask):
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)))
        return self.norm2(x + self.dropout(self.feed_forward(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, self_attn, cross_attn, feed_forward, dropout=0.0):
        super().__init__()
        self.self_attn = self_attn
        self.cross_attn = cross_attn
        self.feed_forward = feed_forward
        self.norms = clones(nn.LayerNorm(d_model), 3)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.norms[0](x + self.dropout(self.self_attn(x, x, x, tgt_mask)))
        if isinstance(self.cross_attn, nn.MultiheadAttention):
            # torch's module: batch_first, and its key_padding_mask is True where a key is <pad>
            padding = src_mask.squeeze(1) == 0
            y, _ = self.cross_attn(x, memory, memory, key_padding_mask=padding, need_weights=False)
        else:
            y = self.cross_attn(x, memory, memory, src_mask)
        x = self.norms[1](x + self.dropout(y))
        return self.norms[2](x + self.dropout(self.feed_forward(x)))


class Seq2SeqTransformer(nn.Module):
    def __init__(
        self,
        src_vocab,
        tgt_vocab,
        d_model=16,
        n_heads=4,
        d_ff=32,
        n_layers=2,
        dropout=0.0,
        torch_cross_attention=False,
    ):
        super().__init__()
        self.d_model = d_model
        attn = MultiHeadAttention(n_heads, d_model, dropout)
        ff = FeedForward(d_model, d_ff, dropout)
        cross = (
            nn.MultiheadAttention(d_model, n_heads, dropout=dropout, batch_first=True)
            if torch_cross_attention
            else attn
        )
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.position = PositionalEncoding(d_model)
        self.encoder = clones(
            EncoderLayer(d_model, copy.deepcopy(attn), copy.deepcopy(ff), dropout), n_layers
        )
        self.decoder = clones(
            DecoderLayer(
                d_model, copy.deepcopy(attn), copy.deepcopy(cross), copy.deepcopy(ff), dropout
            ),
            n_layers,
        )
        self.generator = nn.Linear(d_model, tgt_vocab)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)

    def encode(self, src, src_mask):
        x = self.position(self.src_embed(src) * math.sqrt(self.d_model))
        for layer in self.encoder:
            x = layer(x, src_mask)
        return x

    def decode(self, memory, src_mask, tgt, tgt_mask):
        x = self.position(self.tgt_embed(tgt) * math.sqrt(self.d_model))
        for layer in self.decoder:
            x = layer(x, memory, src_mask, tgt_mask)
        return x

    def forward(self, src, tgt, src_mask, tgt_mask):
        out = self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)
        return F.log_softmax(self.generator(out), dim=-1)


def make_masks(src, tgt, pad=0):
    """src_mask (B, 1, S): 1 where a source token is real; tgt_mask (B, T, T): real and not in
    the future (1 = may attend, the tutorials' convention for masked_fill(mask == 0, …))."""
    src_mask = (src != pad).unsqueeze(-2)
    size = tgt.size(-1)
    causal = torch.tril(torch.ones(1, size, size)).type(torch.uint8)
    tgt_mask = (tgt != pad).unsqueeze(-2) & (causal == 1)
    return src_mask, tgt_mask


def loss_and_argmax(model, src, tgt_in, tgt_out, pad=0):
    """The training loss (NLL over the non-pad target tokens) and the greedy predictions."""
    src_mask, tgt_mask = make_masks(src, tgt_in, pad)
    log_probs = model(src, tgt_in, src_mask, tgt_mask)
    criterion = nn.NLLLoss(ignore_index=pad)
    loss = criterion(
        log_probs.contiguous().view(-1, log_probs.size(-1)), tgt_out.contiguous().view(-1)
    )
    _, predicted = log_probs.max(-1)
    return loss, log_probs, predicted


def train_steps(model, batches, lr=0.5, warmup=4):
    """A few steps of Adam with the paper's betas and a Noam-style LambdaLR; the losses."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: model.d_model**-0.5 * min(max(step, 1) ** -0.5, max(step, 1) * warmup**-1.5),
    )
    losses = []
    for src, tgt_in, tgt_out in batches:
        optimizer.zero_grad()
        loss, _, _ = loss_and_argmax(model, src, tgt_in, tgt_out)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses
