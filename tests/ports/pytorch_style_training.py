"""A small token tagger and its training loop, written the way PyTorch tutorials write them —
tests/ports/test_pytorch_style_training.py runs this file under torch and under minitensor with only
the imports switched. It uses what a loss written for (batch, classes, length) logits needs:
nn.CrossEntropyLoss on (B, C, L) with ignore_index, probability targets built by scatter_,
F.linear with a weight of our own, a LambdaLR warm-up and a StepLR decay, clip_grad_norm_,
eval() under no_grad, and accuracy by boolean-mask indexing.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR, StepLR

PAD = 0


class Tagger(nn.Module):
    """Embed each token, mix it with a residual MLP, then score every tag: (B, L) → (B, C, L)."""

    def __init__(self, vocab_size, n_tags, d_model=16):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model, padding_idx=PAD)
        self.hidden = nn.Linear(d_model, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.tag_weight = nn.Parameter(torch.empty(n_tags, d_model))
        self.tag_bias = nn.Parameter(torch.zeros(n_tags))
        nn.init.xavier_uniform_(self.tag_weight)

    def forward(self, ids):
        x = self.embed(ids)
        x = self.norm(x + F.relu(self.hidden(x)))
        logits = F.linear(x, self.tag_weight, self.tag_bias)  # (B, L, C)
        return logits.permute(0, 2, 1)  # classes on dim 1


def smoothed_targets(tags, n_tags, eps):
    """(B, L) tag ids → (B, C, L) probabilities: 1 − eps on the tag, the rest spread evenly."""
    dist = torch.full((tags.size(0), n_tags, tags.size(1)), eps / (n_tags - 1))
    dist.scatter_(1, tags.unsqueeze(1), 1.0 - eps)
    return dist


def train(model, batches, n_tags, epochs=3, lr=0.02, eps=0.1):
    criterion = nn.CrossEntropyLoss(ignore_index=PAD)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    warmup = LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 3))
    decay = StepLR(optimizer, step_size=2, gamma=0.5)
    losses, rates = [], []
    for _ in range(epochs):
        model.train()
        for ids, tags in batches:
            optimizer.zero_grad()
            logits = model(ids)
            loss = criterion(logits, tags)
            soft = F.cross_entropy(logits, smoothed_targets(tags, n_tags, eps))
            (loss + 0.1 * soft).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            warmup.step()
            losses.append(loss.item())
        decay.step()
        rates.append(decay.get_last_lr()[0])
    return losses, rates


def evaluate(model, ids, tags):
    """Accuracy over the tokens that are not padding, and the per-token loss (B, L)."""
    model.eval()
    with torch.no_grad():
        logits = model(ids)
        pred = logits.argmax(dim=1)
        mask = tags != PAD
        accuracy = (pred[mask] == tags[mask]).float().mean().item()
        per_token = F.cross_entropy(logits, tags, ignore_index=PAD, reduction="none")
    return accuracy, pred, per_token
