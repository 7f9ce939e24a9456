"""A tiny decoder-only GPT and its training and sampling loop, written the way nanoGPT-style
teaching code writes them (our own code, in that style). This file is PyTorch code: it imports
`torch` and nothing of minitensor. tests/ports/test_gpt_style_port.py loads it twice — once with the
real torch, once with `torch`, `torch.nn`, `torch.nn.functional` and `torch.optim` bound to
minitensor's modules (the module-level switch is which `torch` the imports find) — and checks
both give the same numbers on the same weights.

The idioms it uses on purpose: a @dataclass config, nn.ModuleDict/ModuleList, one c_attn Linear
split into q, k, v with .split(n_embd, dim=2), .view(B, T, nh, hs).transpose(1, 2),
F.scaled_dot_product_attention(is_causal=True) or a torch.tril buffer with
masked_fill(bias[:, :, :T, :T] == 0, float('-inf')), nn.GELU, weight tying, self.apply(init)
with nn.init.normal_/zeros_, AdamW with decay and no-decay groups, a cosine learning rate
written into param_group['lr'], gradient accumulation, clip_grad_norm_,
zero_grad(set_to_none=True), a GradScaler, torch.backends' TF32 switches, @torch.no_grad() on
generate and estimate_loss, top-k sampling with torch.topk, torch.multinomial and torch.cat,
and a torch.save/torch.load checkpoint.
"""

import inspect
import math
import os
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 32
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 16
    dropout: float = 0.0
    bias: bool = True  # biases in the Linears and LayerNorms
    flash: bool = True  # F.scaled_dot_product_attention, or the masked softmax by hand


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        # the key, query and value projections of every head, in one batch
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = config.flash and hasattr(torch.nn.functional, "scaled_dot_product_attention")
        if not self.flash:
            # the causal mask: a token attends to itself and to the tokens before it
            self.register_buffer(
                "bias",
                torch.tril(torch.ones(config.block_size, config.block_size)).view(
                    1, 1, config.block_size, config.block_size
                ),
            )

    def forward(self, x):
        B, T, C = x.size()  # batch, sequence length, embedding size (n_embd)

        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)

        # causal self-attention: (B, nh, T, hs) x (B, nh, hs, T) -> (B, nh, T, T)
        if self.flash:
            y = torch.nn.functional.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=None,
                dropout_p=self.dropout if self.training else 0,
                is_causal=True,
            )
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v  # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # the heads side by side again

        y = self.resid_dropout(self.c_proj(y))
        return y


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        x = self.c_fc(x)
        x = self.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x)
        return x


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.config = config

        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # weight tying: the token embedding and the output projection are one matrix
        self.transformer.wte.weight = self.lm_head.weight

        self.apply(self._init_weights)
        # the residual projections get a smaller std, scaled by the depth (GPT-2)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

        print("number of parameters: %.2fK" % (self.get_num_params() / 1e3,))

    def get_num_params(self, non_embedding=True):
        """The number of parameters; the position embeddings are not counted by default
        (the token embeddings are, since they are tied to lm_head)."""
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n_params -= self.transformer.wpe.weight.numel()
        return n_params

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.config.block_size, f"sequence of {t} > block size {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device)  # shape (t)

        tok_emb = self.transformer.wte(idx)  # token embeddings, shape (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos)  # position embeddings, shape (t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)

        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1
            )
        else:
            # at inference only the last position is needed (the list keeps the time axis)
            logits = self.lm_head(x[:, [-1], :])
            loss = None

        return logits, loss

    def crop_block_size(self, block_size):
        """Make the model's context shorter (e.g. to fine-tune a smaller one)."""
        assert block_size <= self.config.block_size
        self.config.block_size = block_size
        self.transformer.wpe.weight = nn.Parameter(self.transformer.wpe.weight[:block_size])
        for block in self.transformer.h:
            if hasattr(block.attn, "bias"):
                block.attn.bias = block.attn.bias[:, :, :block_size, :block_size]

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        param_dict = {pn: p for pn, p in self.named_parameters()}
        param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
        # matrices (weights, embeddings) decay; biases and LayerNorm gains do not
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        num_decay_params = sum(p.numel() for p in decay_params)
        num_nodecay_params = sum(p.numel() for p in nodecay_params)
        print(
            f"num decayed parameter tensors: {len(decay_params)}, "
            f"with {num_decay_params:,} parameters"
        )
        print(
            f"num non-decayed parameter tensors: {len(nodecay_params)}, "
            f"with {num_nodecay_params:,} parameters"
        )
        fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
        use_fused = fused_available and device_type == "cuda"
        extra_args = dict(fused=True) if use_fused else dict()
        optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)
        return optimizer

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        """Continue the sequences idx (LongTensor (b, t)) max_new_tokens times, feeding each
        prediction back in. Call model.eval() first."""
        for _ in range(max_new_tokens):
            # crop the context to the last block_size tokens if it grew longer
            idx_cond = (
                idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size :]
            )
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


# ----------------------------------------------------------------------------- training
block_size = 16
batch_size = 4
gradient_accumulation_steps = 2
learning_rate = 1e-2
max_iters = 6
weight_decay = 1e-1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
warmup_iters = 2
lr_decay_iters = 5
min_lr = 1e-3
eval_iters = 2
device = "cpu"
dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float16"
torch.backends.cuda.matmul.allow_tf32 = True  # allow tf32 on matmul
torch.backends.cudnn.allow_tf32 = True  # allow tf32 on cudnn
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = (
    nullcontext()
    if device_type == "cpu"
    else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
)
# loss scaling for float16 gradients (a no-op if enabled=False)
scaler = torch.amp.GradScaler(device_type, enabled=(dtype == "float16"))


def get_batch(data, ix):
    """The inputs at the offsets ix (a LongTensor) and the targets, one token later."""
    x = torch.stack([torch.from_numpy((data[i : i + block_size]).astype(np.int64)) for i in ix])
    y = torch.stack(
        [torch.from_numpy((data[i + 1 : i + 1 + block_size]).astype(np.int64)) for i in ix]
    )
    if device_type == "cuda":
        x, y = x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device)
    else:
        x, y = x.to(device), y.to(device)
    return x, y


def random_offsets(data):
    return torch.randint(len(data) - block_size, (batch_size,))


def get_lr(it):
    """Linear warm-up, then a cosine decay down to min_lr, then min_lr."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # goes from 1 to 0
    return min_lr + coeff * (learning_rate - min_lr)


@torch.no_grad()
def estimate_loss(model, data, offsets):
    """The mean loss over eval_iters batches of each split, with the model in eval mode."""
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(data[split], offsets[split][k])
            with ctx:
                logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


def report(model, data, offsets, iter_num):
    """train.py's evaluation line: the split losses are 0-d tensors, formatted as numbers."""
    losses = estimate_loss(model, data, offsets)
    line = f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}"
    print(line)
    return losses, line


def train(model, optimizer, data, offsets):
    """max_iters optimizer steps, each over gradient_accumulation_steps micro-batches; offsets
    holds each micro-batch's LongTensor of starting points. Returns the losses and rates."""
    losses, rates = [], []
    for iter_num in range(max_iters):
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        lossf = 0.0
        for micro_step in range(gradient_accumulation_steps):
            X, Y = get_batch(data, offsets[iter_num][micro_step])
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps  # the mean over the micro-batches
            scaler.scale(loss).backward()
            lossf += loss.item()
        if grad_clip != 0.0:
            scaler.unscale_(optimizer)  # the gradients' true norm is what is clipped
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer)  # skipped if a gradient overflowed
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        print(f"iter {iter_num}: loss {lossf:.4f}, lr {lr:.2e}")
        losses.append(lossf)
        rates.append(lr)
    return losses, rates


def save_checkpoint(model, optimizer, model_args, iter_num, best_val_loss, out_dir):
    checkpoint = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "model_args": model_args,
        "iter_num": iter_num,
        "best_val_loss": best_val_loss,
    }
    print(f"saving checkpoint to {out_dir}")
    torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))


def checkpoint_if_better(
    model,
    optimizer,
    model_args,
    losses,
    best_val_loss,
    iter_num,
    out_dir,
    always_save_checkpoint=False,
):
    """train.py's evaluation step: save when the validation loss (a 0-d tensor) improved."""
    if losses["val"] < best_val_loss or always_save_checkpoint:
        best_val_loss = losses["val"]
        if iter_num > 0:
            save_checkpoint(model, optimizer, model_args, iter_num, best_val_loss, out_dir)
    return best_val_loss


def resume(out_dir):
    """The model and optimizer rebuilt from out_dir/ckpt.pt, and the checkpoint itself."""
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    checkpoint = torch.load(ckpt_path, map_location=device)
    gptconf = GPTConfig(**checkpoint["model_args"])
    model = GPT(gptconf)
    state_dict = checkpoint["model"]
    # a compiled model's state_dict has its names prefixed; take the prefix off
    unwanted_prefix = "_orig_mod."
    for k, v in list(state_dict.items()):  # noqa: B007 (the loop as tutorials write it)
        if k.startswith(unwanted_prefix):
            state_dict[k[len(unwanted_prefix) :]] = state_dict.pop(k)
    model.load_state_dict(state_dict)
    model.to(device)
    optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), device_type)
    optimizer.load_state_dict(checkpoint["optimizer"])
    return model, optimizer, checkpoint


def sample(model, start_ids, max_new_tokens, temperature=1.0, top_k=None):
    """sample.py's loop: the prompt as a (1, t) LongTensor, generate, the ids as a list."""
    x = torch.tensor(start_ids, dtype=torch.long, device=device)[None, ...]
    model.eval()
    with torch.no_grad():
        with ctx:
            y = model.generate(x, max_new_tokens, temperature=temperature, top_k=top_k)
    return y[0].tolist()
