"""nGPT (`ngpt`): the block against a float64 numpy reference, unit hidden states and unit weights after a step."""

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest
from flax import nnx

import normjax
from normjax import init
from normjax.studies import runner
from normjax.studies.deep_training import figures as deep_figures
from normjax.studies.deep_training import measure as deep_training
from normjax.studies.grad_norms_at_init import measure as grad_norms_at_init
from normjax.studies.hidden_norms import measure as hidden_norms
from normjax.studies.jacobian_spectrum import measure as jacobian_spectrum
from normjax.train import steps


def _model(arch="decoder", **kw):
    cfg = normjax.ModelConfig(
        arch=arch, num_layers=2, d_model=16, num_heads=2, d_ff=32, vocab_size=32, max_len=8, placement="ngpt", **kw
    )
    return normjax.Transformer(cfg, rngs=nnx.Rngs(0))


def _unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def _reference_block(x, b, causal):
    """NVIDIA/ngpt model.py Block.forward (lines 108-179) without RoPE, in float64 numpy, one sequence (T, d)."""
    f = lambda p: np.asarray(p[...], np.float64)
    att = b.attn.branch
    T, d = x.shape
    H = att.num_heads
    base = d**-0.5
    q, k, v = (x @ f(w.kernel) for w in (att.query, att.key, att.value))
    sqk = (f(att.sqk) / base).reshape(H, d // H)
    q = sqk * _unit(q.reshape(T, H, -1))
    k = sqk * _unit(k.reshape(T, H, -1))
    s = np.einsum("thk,shk->hts", q, k) * np.sqrt(d // H)
    if causal:
        s = np.where(np.tril(np.ones((T, T), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    y = np.einsum("hts,shk->thk", p, v.reshape(T, H, -1)).reshape(T, d) @ f(att.out.kernel)

    def update(h, out, alpha):
        lr = np.abs(f(alpha) * 0.05 / base)
        return _unit(_unit(h) + lr * (_unit(out) - _unit(h)))

    h = update(x, y, b.attn.gate)
    mlp = b.ffn.branch
    uv = (h @ f(mlp.fc1.kernel)) * (f(mlp.suv) * np.sqrt(d))
    u, g = np.split(uv, 2, axis=-1)
    out = (u * g / (1 + np.exp(-g))) @ f(mlp.fc2.kernel)
    return update(h, out, b.ffn.gate)


def _trained(model, steps_n=2):
    cfg = model.cfg
    spec = steps.StepSpec(nnx.graphdef(model), "lm")
    hp = dict.fromkeys(steps.HPARAMS, 0.0) | dict(
        lr=0.05, warmup_steps=1, warmup_init_lr=0.05, total_steps=10, d_model=cfg.d_model, clip_norm=1.0,
        divergence_loss=1e9, divergence_patience=5,
    )  # fmt: skip
    state = steps.init_state(spec, model, 0, hp)
    rng = np.random.default_rng(0)
    batch = {"tokens": jnp.asarray(rng.integers(0, cfg.vocab_size, (2, 6))), "mask": jnp.ones((2, 6), bool)}
    batch["targets"] = jnp.roll(batch["tokens"], -1, axis=1)
    for _ in range(steps_n):
        state, metrics = jax.jit(steps.train_step, static_argnums=0)(spec, state, batch)
        assert np.isfinite(metrics["loss"])
    return nnx.merge(spec.graphdef, state.params, state.consts), state.params


def _assert_unit_weights(params):
    for path, a in jax.tree_util.tree_leaves_with_path(params):
        names = [getattr(k, "key", getattr(k, "name", None)) for k in path]
        if "embedding" in names:
            axis = -1
        elif "kernel" in names:
            axis = -1 if names[names.index("kernel") - 1] in ("out", "fc2") else -2
        else:
            continue
        np.testing.assert_allclose(np.linalg.norm(np.asarray(a), axis=axis), 1.0, rtol=1e-5, err_msg=str(names))


@pytest.mark.parametrize("arch", ["decoder", "encoder"])
@pytest.mark.parametrize("trained", [False, True])
def test_blocks_match_the_float64_reference_and_stay_unit(arch, trained, x64):
    model = _model(arch, dtype="float64", param_dtype="float64", tie_embeddings=False)
    if trained:
        model = _trained(model)[0]
    tokens = jnp.asarray(np.random.default_rng(1).integers(0, 32, (2, 6)))
    _, traces = model.forward(tokens, record=True)
    records, last = traces[arch]
    streams = [r["stream"] for r in records] + [last]
    for l, block in enumerate(model.stacks[arch].layers):
        for bidx in range(2):
            ref = _reference_block(np.asarray(streams[l][bidx]), block, causal=arch == "decoder")
            np.testing.assert_allclose(np.asarray(streams[l + 1][bidx]), ref, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.linalg.norm(np.asarray(streams[l + 1]), axis=-1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("tie", [False, True])
def test_every_weight_matrix_is_unit_at_init_and_after_a_train_step(tie):
    model = _model(tie_embeddings=tie)
    before = nnx.state(model, nnx.Param)
    _assert_unit_weights(before)
    after = _trained(model)[1]
    _assert_unit_weights(after)
    # the steps really moved them: W^O of block 0 changed, so its unit rows come from the post-update hook
    w0, w1 = (
        np.asarray(p["stacks"]["decoder"]["layers"][0]["attn"]["branch"]["out"]["kernel"][...]) for p in (before, after)
    )
    assert np.abs(w1 - w0).max() > 1e-3


def test_scalings_start_as_published():
    model = _model(tie_embeddings=False)
    b = model.stacks["decoder"].layers[0]
    base = 16**-0.5
    np.testing.assert_allclose(b.attn.gate[...] * b.attn.eigen_factor, init.NGPT_ALPHA_INIT)
    np.testing.assert_allclose(b.attn.branch.sqk[...] / base, 1.0)
    np.testing.assert_allclose(model.sz[...] * model.sz_factor, 1.0)
    np.testing.assert_allclose(b.ffn.branch.suv[...], 1.0)
    assert b.attn.norm is None and b.attn.branch.query.bias is None


@pytest.mark.parametrize(
    "kw",
    [
        dict(arch="encoder_decoder"),
        dict(qk_norm=True),
        dict(final_norm=True),
        dict(branch_scaling="gpt2"),
        dict(placement=("ngpt", "pre")),
        dict(theory=True, num_heads=1),
        dict(norm="rmsnorm"),
        dict(activation="gelu"),
        dict(norm_bias=False),
    ],
)
def test_refuses_what_the_paper_does_not_define(kw):
    with pytest.raises(ValueError, match="ngpt"):
        normjax.ModelConfig(**({"placement": "ngpt"} | kw))


def test_runs_in_its_paper_studies(tmp_path):
    """ngpt is in the `:paper` presets of jacobian_spectrum and deep_training: both run it at a tiny size."""
    jac = ml_collections.ConfigDict(
        dict(
            placements=("ngpt",), stream_placements=(), depths=(1, 2), vocab_size=17, d_model=8, num_heads=2,
            d_ff=16, seq_len=3, seed=0, num_seeds=1, exact_max_n=4096, top_k=4, resolution=1e-12,
        )
    )  # fmt: skip
    runs = runner.run_study("jacobian_spectrum", str(tmp_path), jac, jacobian_spectrum.compute, jacobian_spectrum.plot)[
        "results"
    ]
    # unit(x) removes each token's radial direction: at least T = 3 structural zeros in d x_L / d x_0
    assert runs["runs"]["ngpt"]["2"]["io"]["below_floor"]["mean"] >= 3
    deep = ml_collections.ConfigDict(
        dict(
            runs=("ngpt",), depths=(2,), side_runs=(), side_depths=(), d_model=16, num_heads=2, d_ff=32, seq_len=16,
            batch_size=4, max_bytes=100_000, data_seed=0, lr=3e-3, num_steps=4, update_lr=1e-4, optimizer="adam",
            b1=0.9, b2=0.98, eps=1e-9, early_steps=2, probe_every=2, final_window=2, divergence_factor=1.5,
            divergence_patience=10, divergence_check_every=10, s7_depths=(), s7_lrs=(1e-3,), s7_warmup=0, s7_steps=4,
            s7_schedule="constant", seed=0, num_seeds=1,
        )
    )  # fmt: skip
    rec = runner.run_study("deep_training", str(tmp_path), deep, deep_training.compute, deep_figures.plot)["results"]
    rec = rec["runs"]["ngpt"]["2"][0]  # the one seed
    assert rec["diverged_step"] is None and np.isfinite(rec["loss"]).all()


def test_has_no_norm_sites_for_the_layernorm_tools():
    model = _model()
    _, probes = normjax.probe(model, jnp.ones((1, 4), jnp.int32))
    assert all(not sites for sites in probes["decoder"].norm_inputs) and probes["decoder"].final_norm_input is None


def test_hidden_norms_and_grad_norms_measure_it_where_it_builds_and_say_where_not(tmp_path):
    """nGPT has no theory setting (its weights are unit-norm) and no encoder-decoder: those cells are left out
    and named in the results, the others are measured."""
    hidden = ml_collections.ConfigDict(
        dict(placements=("pre", "ngpt"), settings=("theory", "real"), vocab_size=17, d_model=16, num_heads=2,
             d_ff=32, num_layers=2, batch_size=2, seq_len=4, seed=0, num_seeds=1)
    )  # fmt: skip
    rec = runner.run_study("hidden_norms", str(tmp_path), hidden, hidden_norms.compute, hidden_norms.plot)["results"]
    assert set(rec["runs"]["real"]) == {"pre", "ngpt"} and set(rec["runs"]["theory"]) == {"pre"}
    assert list(rec["skipped_in_theory"]) == ["ngpt"]
    grads = ml_collections.ConfigDict(
        dict(archs=("encoder_decoder", "encoder"), placements=("pre", "ngpt"), vocab_size=17, d_model=16,
             num_heads=2, d_ff=32, num_layers=2, batch_size=2, seq_len=4, num_batches=2, seed=0, num_seeds=1)
    )  # fmt: skip
    study = grad_norms_at_init
    rec = runner.run_study("grad_norms_at_init", str(tmp_path), grads, study.compute, study.plot)["results"]
    assert set(rec["runs"]["encoder"]) == {"pre", "ngpt"} and set(rec["runs"]["encoder_decoder"]) == {"pre"}
    assert list(rec["skipped"]["encoder_decoder"]) == ["ngpt"]
