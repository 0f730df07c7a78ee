"""The PyTorch user's path to a block Jacobian's spectrum: torch.func.jacrev, then torch.linalg (benchmarks only).

torch.func.jacfwd is no option here: torch 2.13 has no forward-mode AD for the CPU attention kernels
(aten::_native_multi_head_attention, _scaled_dot_product_flash_attention_for_cpu). jacrev runs, though its vmap
falls back to a loop for the flash-attention backward (a "performance drop" warning) on the default SDPA backend.
"""

import os

import numpy as np
import torch

from benchmarks import torch_reference


def use_all_cores() -> None:
    """As many intra-op threads as XLA uses: every core."""
    torch.set_num_threads(os.cpu_count())


def seed_block(params: dict, d_model: int, num_heads: int, placement: str):
    """The seed's encoder layer (eval, dropout 0, d_ff = 4 d) holding one normjax block's weights, as
    x (T, d) -> y (T, d)."""
    if placement not in ("pre", "post"):
        raise ValueError(f"the seed's torch layer is Pre- or Post-Norm only, got placement {placement!r}")
    layer = torch_reference.make_layer("seed", d_model, num_heads, 4 * d_model, dropout=0.0, placement=placement)
    torch_reference.load_block(layer, params)
    layer.eval().requires_grad_(False)
    return lambda x: layer(x[None])[0]


def as_tensor(x) -> torch.Tensor:
    """A float32 torch copy of an array (JAX or NumPy)."""
    return torch.from_numpy(np.array(x, np.float32))


def forward(f, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return f(x)


def jacobian(f, x: torch.Tensor) -> torch.Tensor:
    """J = jacrev(f)(x) as an (n_out, n_in) matrix."""
    return torch.func.jacrev(f)(x).reshape(-1, x.numel())


def singular_values(f, x: torch.Tensor, k: int) -> torch.Tensor:
    """The top k singular values of f's Jacobian at x as a PyTorch user writes it: J = jacrev(f)(x) as an
    (n_out, n_in) matrix, then matrix_norm(J, 2) for k = 1, else svdvals(J)[:k]."""
    J = jacobian(f, x)
    if k == 1:
        return torch.linalg.matrix_norm(J, 2)[None]
    return torch.linalg.svdvals(J)[:k]
