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


def unit(x: torch.Tensor) -> torch.Tensor:
    """x / ||x|| over the last axis (nGPT's justnorm)."""
    return x / x.norm(dim=-1, keepdim=True)


class NGPTLayer(nn.Module):
    """nGPT's block in PyTorch (Loshchilov et al. 2024; NVIDIA/ngpt `model.py`, its Block without the causal
    mask), the placement normjax calls "ngpt": no norm module, no biases.

    h = unit(x), x = unit(h + |alpha_A| (unit(Attn(x)) - h)), then the same with the MLP; q and k unit per head
    times s_qk, softmax scale sqrt(d_k); MLP W2 (u * SiLU(v)) with (u, v) = s_uv sqrt(d) W_uv x. The scales are
    stored as normjax stores them (alpha and s_qk at 1/sqrt(d), used times their init over that base).
    """

    def __init__(self, d_model: int, nhead: int, d_ff: int, dropout: float):
        super().__init__()
        self.nhead, self.base = nhead, 1.0 / math.sqrt(d_model)
        linear = lambda d_in, d_out: nn.Linear(d_in, d_out, bias=False)
        self.query, self.key, self.value, self.out = (linear(d_model, d_model) for _ in range(4))
        self.fc1, self.fc2 = linear(d_model, 2 * d_ff), linear(d_ff, d_model)
        self.sqk = nn.Parameter(torch.full((d_model,), self.base))
        self.suv = nn.Parameter(torch.ones(2 * d_ff))
        self.alpha_attn = nn.Parameter(torch.full((d_model,), self.base))
        self.alpha_mlp = nn.Parameter(torch.full((d_model,), self.base))
        self.dropout = nn.Dropout(dropout)
        self.sqrt_d = math.sqrt(d_model)

    def _attn(self, x):
        B, T, D = x.shape
        heads = lambda z: z.reshape(B, T, self.nhead, D // self.nhead).transpose(1, 2)
        sqk = (self.sqk / self.base).reshape(self.nhead, 1, D // self.nhead)
        q, k, v = sqk * unit(heads(self.query(x))), sqk * unit(heads(self.key(x))), heads(self.value(x))
        p = self.dropout.p if self.training else 0.0
        out = nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=p, scale=math.sqrt(D // self.nhead))
        return self.out(out.transpose(1, 2).reshape(B, T, D))

    def _mlp(self, x):
        u, v = (self.fc1(x) * (self.suv * self.sqrt_d)).chunk(2, dim=-1)
        return self.fc2(self.dropout(u * nn.functional.silu(v)))

    def forward(self, x):
        eigen = 0.05 / self.base  # alpha's init over its stored base: NGPT_ALPHA_INIT * sqrt(d)
        for branch, alpha in ((self._attn, self.alpha_attn), (self._mlp, self.alpha_mlp)):
            h = unit(x)
            x = unit(h + (alpha * eigen).abs() * (unit(self.dropout(branch(x))) - h))
        return x


def make_layer(kind: str, d_model: int, nhead: int, d_ff: int, dropout: float, placement: str) -> nn.Module:
    """kind "seed": SeedEncoderLayer; "torch": nn.TransformerEncoderLayer(norm_first=placement == "pre"), both
    ReLU; placement "post" or "pre". Placement "ngpt" is NGPTLayer for either kind (the seed notes have none)."""
    if placement == "ngpt":
        return NGPTLayer(d_model, nhead, d_ff, dropout)
    if placement not in ("post", "pre"):
        raise ValueError(f"unknown torch placement {placement!r}: 'post', 'pre' or 'ngpt'")
    if kind == "seed":
        return SeedEncoderLayer(d_model, nhead, d_ff, dropout, pre=placement == "pre")
    if kind == "torch":
        return nn.TransformerEncoderLayer(
            d_model, nhead, d_ff, dropout, activation="relu", batch_first=True, norm_first=placement == "pre"
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
    """Embedding * sqrt(d) + sinusoidal positions, a stack of encoder layers, a final LN for Pre-LN, tied head
    (for nGPT: logits times s_z, per vocabulary entry).

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
        placement: str,
        max_len: int,
    ):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        self.register_buffer("positions", sinusoidal_positions(max_len, d_model))
        self.layers = nn.ModuleList([make_layer(kind, d_model, nhead, d_ff, dropout, placement) for _ in range(layers)])
        self.final_norm = nn.LayerNorm(d_model) if placement == "pre" else nn.Identity()
        self.sz = nn.Parameter(torch.ones(vocab)) if placement == "ngpt" else None
        self.scale = math.sqrt(d_model)

    def forward(self, tokens):
        x = self.embedding(tokens) * self.scale + self.positions[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        logits = self.final_norm(x) @ self.embedding.weight.T
        return logits if self.sz is None else logits * self.sz


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


def load_ngpt_block(layer: NGPTLayer, params: dict) -> None:
    """Copies one normjax nGPT encoder block's parameters (a `normjax.layer_params` entry) into `layer`."""
    t = lambda name: torch.from_numpy(np.asarray(params[name], np.float32).copy())
    with torch.no_grad():
        for name in ("query", "key", "value", "out"):
            getattr(layer, name).weight.copy_(t(f"attn/{name}/kernel").T)
        layer.fc1.weight.copy_(t("ffn/fc1/kernel").T)
        layer.fc2.weight.copy_(t("ffn/fc2/kernel").T)
        layer.sqk.copy_(t("attn/sqk"))
        layer.suv.copy_(t("ffn/suv"))
        layer.alpha_attn.copy_(t("attn/gate"))
        layer.alpha_mlp.copy_(t("ffn/gate"))
