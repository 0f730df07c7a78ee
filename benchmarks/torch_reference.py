"""The PyTorch encoder layers of the seed notes (Pre-/Post-Norm) and their loading from a normjax block."""

import math

import numpy as np
import torch
from torch import nn


class SeedEncoderLayer(nn.Module):
    """The seed's PreNormEncoderLayer (`pre=True`) or PostNormEncoderLayer, written as the notes write them.

    Pre:  x + Attn(LN1(x)), then x + FFN(LN2(x)).  Post: LN1(x + Attn(x)), then LN2(y + FFN(y)).
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1, pre: bool = True):
        super().__init__()
        self.pre = pre
        self.self_attn = nn.MultiheadAttention(d_model, nhead, dropout=dropout, batch_first=True)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = nn.ReLU()

    def _attn(self, x):
        return self.self_attn(x, x, x, need_weights=False)[0]

    def _ffn(self, x):
        return self.linear2(self.dropout(self.activation(self.linear1(x))))

    def forward(self, src):
        x = src
        if self.pre:
            x = x + self.dropout1(self._attn(self.norm1(x)))
            return x + self.dropout2(self._ffn(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self._attn(x)))
        return self.norm2(x + self.dropout2(self._ffn(x)))


def make_layer(kind: str, d_model: int, nhead: int, d_ff: int, dropout: float, pre: bool) -> nn.Module:
    """kind "seed": SeedEncoderLayer; "torch": nn.TransformerEncoderLayer(norm_first=pre), both ReLU."""
    if kind == "seed":
        return SeedEncoderLayer(d_model, nhead, d_ff, dropout, pre=pre)
    if kind == "torch":
        return nn.TransformerEncoderLayer(
            d_model, nhead, d_ff, dropout, activation="relu", batch_first=True, norm_first=pre
        )
    raise ValueError(f"unknown torch layer kind {kind!r}: 'seed' or 'torch'")


def sinusoidal_positions(length: int, d_model: int) -> torch.Tensor:
    """The Transformer's sin/cos position table (length, d_model)."""
    pos = np.arange(length)[:, None]
    freq = np.exp(-math.log(10000.0) * np.arange(0, d_model, 2) / d_model)
    table = np.zeros((length, d_model), np.float32)
    table[:, 0::2], table[:, 1::2] = np.sin(pos * freq), np.cos(pos * freq)
    return torch.from_numpy(table)


class TokenModel(nn.Module):
    """Embedding * sqrt(d) + sinusoidal positions, a stack of encoder layers, optional final LN, tied head.

    The same network as a normjax encoder Transformer of this size.
    """

    def __init__(
        self,
        kind: str,
        vocab: int,
        d_model: int,
        nhead: int,
        d_ff: int,
        layers: int,
        dropout: float,
        pre: bool,
        max_len: int,
    ):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        self.register_buffer("positions", sinusoidal_positions(max_len, d_model))
        self.layers = nn.ModuleList([make_layer(kind, d_model, nhead, d_ff, dropout, pre) for _ in range(layers)])
        self.final_norm = nn.LayerNorm(d_model) if pre else nn.Identity()
        self.scale = math.sqrt(d_model)

    def forward(self, tokens):
        x = self.embedding(tokens) * self.scale + self.positions[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.final_norm(x) @ self.embedding.weight.T


def load_block(layer: nn.Module, params: dict) -> None:
    """Copies one normjax encoder block's parameters (a `normjax.layer_params` entry) into `layer`.

    normjax computes x @ W + b with W (d_in, d_out); torch computes x @ W^T + b. The attention sublayer's
    norm goes to norm1, the FFN sublayer's to norm2 (the seed's naming for both placements).
    """
    t = lambda name: torch.from_numpy(np.asarray(params[name], np.float32).copy())
    with torch.no_grad():
        attn = layer.self_attn
        attn.in_proj_weight.copy_(torch.cat([t(f"attn/{n}/kernel").T for n in ("query", "key", "value")]))
        attn.in_proj_bias.copy_(torch.cat([t(f"attn/{n}/bias") for n in ("query", "key", "value")]))
        attn.out_proj.weight.copy_(t("attn/out/kernel").T)
        attn.out_proj.bias.copy_(t("attn/out/bias"))
        for torch_name, name in (("linear1", "ffn/fc1"), ("linear2", "ffn/fc2")):
            getattr(layer, torch_name).weight.copy_(t(f"{name}/kernel").T)
            getattr(layer, torch_name).bias.copy_(t(f"{name}/bias"))
        for torch_name, name in (("norm1", "attn/norm"), ("norm2", "ffn/norm")):
            getattr(layer, torch_name).weight.copy_(t(f"{name}/scale"))
            getattr(layer, torch_name).bias.copy_(t(f"{name}/bias"))
