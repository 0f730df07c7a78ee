"""The benchmarks' PyTorch nGPT layer computes normjax's nGPT block (skipped without PyTorch, a benchmark extra)."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import normjax

torch = pytest.importorskip("torch")
torch_reference = pytest.importorskip("benchmarks.torch_reference")


def test_ngpt_layer_matches_normjax_block():
    d, heads, d_ff = 64, 4, 128
    cfg = normjax.ModelConfig(
        arch="encoder", vocab_size=32, d_model=d, num_heads=heads, d_ff=d_ff, num_layers=1, placement="ngpt"
    )
    model = normjax.Transformer(cfg, rngs=nnx.Rngs(0))
    block = model.stacks["encoder"].layers[0]
    rng = np.random.default_rng(0)
    for scale in (block.attn.branch.sqk, block.ffn.branch.suv, block.attn.gate, block.ffn.gate):  # off their inits
        scale[...] = scale[...] * (1 + 0.1 * jnp.asarray(rng.standard_normal(scale.shape), jnp.float32))
    layer = torch_reference.NGPTLayer(d, heads, d_ff, dropout=0.0)
    torch_reference.load_ngpt_block(layer, normjax.layer_params(nnx.state(model, nnx.Param), model)[0])
    x = rng.standard_normal((2, 8, d)).astype(np.float32)
    x /= np.linalg.norm(x, axis=-1, keepdims=True)
    expected, _ = block(jnp.asarray(x), normjax.BlockContext())
    np.testing.assert_allclose(layer(torch.from_numpy(x)).detach().numpy(), np.asarray(expected), atol=1e-6)
