"""A PyTorch seq2seq program in the style of the official nn.Transformer translation tutorial:
a Dataset of variable-length pairs, a DataLoader whose collate_fn pads them with
pad_sequence, nn.Transformer with its causal and padding masks, the usual device line and
CUDA seeding. Written for torch; test_nn_transformer_port.py runs it unchanged under both
libraries (only the imports switched) on the same weights."""

import math

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader, Dataset

PAD, BOS, EOS = 0, 1, 2
VOCAB = 12
device = "cuda" if torch.cuda.is_available() else "cpu"


class ReversePairs(Dataset):
    """Pair i: a sequence of tokens 3.. and its reverse, of length 2 + i % 4."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        src = [3 + (i * 7 + 5 * k) % (VOCAB - 3) for k in range(2 + i % 4)]
        return torch.tensor(src), torch.tensor([BOS] + src[::-1] + [EOS])


def collate(batch):
    src = pad_sequence([s for s, _ in batch], padding_value=PAD)
    tgt = pad_sequence([t for _, t in batch], padding_value=PAD)
    return src.to(device), tgt.to(device)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=64):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        return x + self.pe[: x.size(0)]


class Seq2SeqTransformer(nn.Module):
    def __init__(self, d_model=16, nhead=2, layers=2, d_ff=32, norm_first=False):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(VOCAB, d_model)
        self.pos = PositionalEncoding(d_model)
        self.transformer = nn.Transformer(
            d_model, nhead, layers, layers, d_ff, dropout=0.0, norm_first=norm_first
        )
        self.generator = nn.Linear(d_model, VOCAB)

    def encode_tokens(self, ids):
        return self.pos(self.embed(ids) * math.sqrt(self.d_model))

    def forward(self, src, tgt):
        tgt_mask = nn.Transformer.generate_square_subsequent_mask(tgt.size(0)).to(device)
        src_pad, tgt_pad = (src == PAD).transpose(0, 1), (tgt == PAD).transpose(0, 1)
        out = self.transformer(
            self.encode_tokens(src),
            self.encode_tokens(tgt),
            tgt_mask=tgt_mask,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        return self.generator(out)


def train(model, epochs=2, batch_size=4):
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    loader = DataLoader(ReversePairs(12), batch_size=batch_size, collate_fn=collate)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD)
    model.train()
    losses = []
    for _ in range(epochs):
        for src, tgt in loader:
            logits = model(src, tgt[:-1, :])
            loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt[1:, :].reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses
