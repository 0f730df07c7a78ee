"""Regressions suggested by peers' reports: OLMo-core PR #698 (LNS scale lost), registry formulas, norm aliasing."""

import math
import re
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from model_fixtures import model_inputs, tiny_model

import normjax
from normjax import registry
from normjax.io import WorkdirError
from normjax.norms import NORM_KINDS
from normjax.train import checkpoint, optimizers, steps

EPS = 1e-5  # ModelConfig.norm_eps default

# orbax leaves the reads of a refused restore (test_lns_scale_survives_...) as coroutines never awaited; they are
# collected, and reported, in whichever test of this module runs next
pytestmark = [
    pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]


# -- numpy re-implementations of one block's pieces, from its params ------------------------------------------------
def _ln(z, p, prefix):
    c = z - z.mean(-1, keepdims=True)
    return c / np.sqrt((c**2).mean(-1, keepdims=True) + EPS) * p[f"{prefix}/scale"] + p[f"{prefix}/bias"]


def _linear(x, p, name):
    return x @ p[f"{name}/kernel"] + p[f"{name}/bias"]


def _attention(x, p, heads=2):
    """Causal multi-head self attention of `x` (B, T, D) with the block's attn/{query,key,value,out} weights."""
    B, T, D = x.shape
    q, k, v = (
        _linear(x, p, f"attn/{n}").reshape(B, T, heads, D // heads).transpose(0, 2, 1, 3)
        for n in ("query", "key", "value")
    )
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D // heads)
    logits = np.where(np.tril(np.ones((T, T), bool)), logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return _linear((w @ v).transpose(0, 2, 1, 3).reshape(B, T, D), p, "attn/out")


def _mlp(x, p):
    return _linear(np.maximum(_linear(x, p, "ffn/fc1"), 0), p, "ffn/fc2")


BRANCH = {"attn": _attention, "ffn": _mlp}


def _layer_params(model):
    """[{name: float64 array} per block] of the decoder stack."""
    per_layer = normjax.layer_params(nnx.state(model, nnx.Param), model, "decoder")
    return [{k: np.asarray(v, np.float64) for k, v in p.items()} for p in per_layer]


def _set_params(model, fn):
    """Replaces every Param leaf v (path "a/b/c") by fn(path, v) (fn returns None to keep it)."""
    state = nnx.state(model, nnx.Param)
    for path, var in nnx.to_flat_state(state):
        new = fn("/".join(map(str, path)), np.asarray(var[...]))
        if new is not None:
            var.set_value(jnp.asarray(new, var[...].dtype))
    nnx.update(model, state)


# -- 1. the LNS scale 1/sqrt(l), measured from the forward pass ------------------------------------------------------
LNS = dict(placement="lns", num_layers=4)
DEPTH = LNS["num_layers"]
WANT = [1.0 / math.sqrt(l) for l in range(1, DEPTH + 1)]  # l = 1..L


def _homogeneous_lns_model(**fields):
    """A LNS model whose branches are positively homogeneous, F(c u) = c F(u) for c > 0: W^Q = W^K = 0 (uniform
    causal attention, linear in its input) and zero projection and MLP biases (ReLU)."""
    model = tiny_model(**(LNS | fields))
    zero = re.compile(r"attn/branch/(query|key)/(kernel|bias)$|branch/(value|out|fc1|fc2)/bias$")
    _set_params(model, lambda path, v: np.zeros_like(v) if zero.search(path) else None)
    return model


def _scanned_copy(model, **fields):
    """A model built natively with scan_layers=True (its own constants, made under nnx.vmap) holding `model`'s
    Params stacked; unlike model_fixtures.scan_twin, nothing but the Params is copied."""
    twin = normjax.Transformer(model.cfg.replace(scan_layers=True, **fields), rngs=nnx.Rngs(99))
    pure = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    layers = pure["stacks"]["decoder"]["layers"]
    pure["stacks"]["decoder"]["layers"] = jax.tree.map(lambda *a: np.stack(a), *[layers[i] for i in sorted(layers)])
    params = nnx.state(twin, nnx.Param)
    nnx.replace_by_pure_dict(params, pure)
    nnx.update(twin, params)
    return twin


def _measured_scales(model, tokens):
    """{sublayer: [c_l per block]}: the factor c with F(c N(x)) = c F(N(x)) each block's branch saw, fitted from the
    probed norm input x and branch output against a numpy F(N(x)) (the fit must be exact: a pure rescaling)."""
    _, probes = normjax.probe(model, tokens)
    rec, params = probes["decoder"], _layer_params(model)
    scales = {"attn": [], "ffn": []}
    for l, p in enumerate(params):
        for name, F in BRANCH.items():
            x = np.asarray(rec.norm_inputs[l][f"{name}.pre"], np.float64)
            got = np.asarray(rec.branch_outputs[l][name], np.float64)
            ref = F(_ln(x, p, f"{name}/norm"), p)
            c = float((got * ref).sum() / (ref * ref).sum())
            np.testing.assert_allclose(got, c * ref, rtol=1e-4, atol=1e-6, err_msg=f"block {l} {name}")
            scales[name].append(c)
    return scales


def _assert_lns_scales(model, tokens):
    for name, got in _measured_scales(model, tokens).items():
        np.testing.assert_allclose(got, WANT, rtol=1e-5, err_msg=name)


def test_lns_scale_is_one_over_sqrt_l_looped_scanned_and_remat():
    loop = _homogeneous_lns_model()
    tokens = model_inputs(loop.cfg)[0]
    _assert_lns_scales(loop, tokens)
    want = np.asarray(loop(tokens))
    variants = {"scan": _scanned_copy(loop), "scan+remat": _scanned_copy(loop, remat=True)}
    for label, model in variants.items():
        consts = nnx.state(model, nnx.Variable)
        assert not any(isinstance(v, jax.ShapeDtypeStruct) for v in jax.tree.leaves(consts)), label
        _assert_lns_scales(model, tokens)
        np.testing.assert_allclose(model(tokens), want, rtol=1e-5, atol=1e-5, err_msg=label)
        for l in range(DEPTH):  # block l alone (a slice of the scanned stack; one compiled program for all l)
            x = jax.random.normal(jax.random.key(l), (5, 16))
            np.testing.assert_allclose(
                normjax.block_fn(model, l)(x), normjax.block_fn(loop, l)(x), rtol=1e-5, atol=1e-5, err_msg=label
            )


def _train_state(model):
    spec = steps.StepSpec(nnx.graphdef(model), "lm", optimizer=optimizers.OptimizerSpec("sgd"))
    return spec, steps.init_state(spec, model, 0, dict.fromkeys(steps.HPARAMS, 0.0))


@pytest.mark.parametrize("scan", [False, True], ids=["loop", "scan"])
def test_lns_scale_survives_checkpoint_restore_and_other_depths_are_refused(scan, tmp_path):
    loop = _homogeneous_lns_model()
    model = _scanned_copy(loop) if scan else loop
    tokens = model_inputs(model.cfg)[0]
    want = np.asarray(model(tokens))
    ckpt = checkpoint.Checkpointer(str(tmp_path / "checkpoints"), fingerprint="f")
    try:
        ckpt.save(3, _train_state(model)[1], 0)
        # restored into a fresh model of the same config (another seed): the consts come from the config, the
        # params from the checkpoint
        fresh = tiny_model(seed=7, scan_layers=scan, **LNS)
        assert not np.allclose(fresh(tokens), want)  # so the restore below has something to do
        spec, like = _train_state(fresh)
        state, _ = ckpt.restore(3, like)
        restored = nnx.merge(spec.graphdef, state.params, state.consts)
        np.testing.assert_array_equal(restored(tokens), want)
        _assert_lns_scales(restored, tokens)
        # another depth (or the other layer layout) does not fit: refused, never truncated, padded or re-scaled
        others = [dict(num_layers=DEPTH - 1), dict(num_layers=DEPTH + 1), dict(num_layers=DEPTH, scan_layers=not scan)]
        for fields in others:
            other = tiny_model(seed=7, **(LNS | dict(scan_layers=scan) | fields))
            with pytest.raises(WorkdirError, match="does not fit this run's state"):
                ckpt.restore(3, _train_state(other)[1])
    finally:
        ckpt.close()


# -- 2. every registry formula against its wiring --------------------------------------------------------------------
def _sublayer_wirings(entry):
    return [entry.wiring(s) for s in ("attn", "ffn")]  # what a decoder-only block wires (cross is checked alike)


# (what a formula says, what the entry must then have); each holds in both directions for every layer placement
FORMULA_FEATURES = {
    "a second norm N2": (r"\bN2\(", lambda e: any(w.norms == 2 for w in e.wirings.values())),
    "a norm N, N1 or N2": (r"\bN[12]?\(", lambda e: any(w.norms >= 1 for w in e.wirings.values())),
    "the depth scale sqrt(l)": (r"sqrt\(l\)", lambda e: any(w.depth_scaled for w in e.wirings.values())),
    "the block input x_in": (r"\bx_in\b", lambda e: any(w.block_skip for w in e.wirings.values())),
    "per-head QKV-norm": (r"QKV-norm", lambda e: any(w.qkv_norm == ("q", "k", "v") for w in e.wirings.values())),
    "per-head scales": (r"per-head scales", lambda e: any(w.head_scale for w in e.wirings.values())),
    "a norm inside F": (
        r"before W\^O|after the FFN activation|N\(act\(",
        lambda e: any(w.inner_norm for w in e.wirings.values()),
    ),
    "an embedding norm": (r"x_0 = N\(embeddings\)", lambda e: e.embedding_norm),
    "the dual stream d": (r"\bd = d \+ F", lambda e: e.dual_stream),
    "unit vectors": (r"\bunit\(", lambda e: any(w.hypersphere for w in e.wirings.values())),
    "hyper-connection streams": (r"H_res|`shc`", lambda e: e.hyper_streams),
    "a learned gate": (  # on the branch (ReZero, LayerScale, nGPT) or on the stream (GPAS)
        r"\b(alpha|lambda) (F\(|\(unit\(F\()|SiLU\(alpha\)",
        lambda e: any(w.gate != "none" for w in e.wirings.values()),
    ),
    "omega on the residual": (r"\bomega x\b", lambda e: any(w.omega for w in e.wirings.values())),
}


_DEFINITION = re.compile(r"([A-Z]\w*)\(x\) = ([^,]+)")


def _expanded(formula):
    """`formula` plus the definitions, from any registry entry's formula, of the functions it uses and does not
    define itself (the registry defines GPAS(x) once, in `pre_gpas`)."""
    defined = {m[1]: m[0] for p in registry.REGISTRY.values() for m in _DEFINITION.finditer(p.formula)}
    extra = [d for f, d in defined.items() if re.search(rf"\b{f}\(", formula) and f"{f}(x) = " not in formula]
    return ", ".join([formula, *extra])


@pytest.mark.parametrize("name", registry.LAYER_PLACEMENTS)
def test_formula_names_exactly_the_wirings_features(name):
    entry = registry.get(name)
    for feature, (pattern, has) in FORMULA_FEATURES.items():
        named = re.search(pattern, _expanded(entry.formula)) is not None
        assert named == bool(has(entry)), f"{name}: the formula {'names' if named else 'omits'} {feature}"


@pytest.mark.parametrize("name", [p for p in registry.PLACEMENTS if registry.get(p).is_recipe])
def test_recipe_formulas_name_the_layers_they_resolve_to(name):
    entry, depth = registry.get(name), 8
    layers = entry.layers(normjax.ModelConfig(num_layers=depth, placement=name), depth)
    words = {"quarter": 1 / 4, "third": 1 / 3, "half": 1 / 2}
    if m := re.fullmatch(r"(\w+) for the first (\w+) of layers, (\w+) after", entry.formula):
        first, fraction, rest = m[1], words[m[2]], m[3]
        assert normjax.ModelConfig().mixln_fraction == fraction  # the formula's fraction is the default
        num_first = math.floor(fraction * depth)
    elif m := re.fullmatch(r"`(\w+)` for block 0, `(\w+)` after", entry.formula):
        first, rest, num_first = m[1], m[2], 1
    else:
        pytest.fail(f"{name}: unparsed recipe formula {entry.formula!r}")
    assert {first, rest} <= set(registry.LAYER_PLACEMENTS)
    assert layers == (first,) * num_first + (rest,) * (depth - num_first)
    model = tiny_model(placement=name, num_layers=depth)
    assert [model.stacks["decoder"].block(l).placement for l in range(depth)] == list(layers)


def _split_top(text):
    """`text` split at ", " outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and text.startswith(", ", i):
            parts.append(text[start:i])
            start = i + 2
    return parts + [text[start:]]


def _parse(formula):
    """{"default": expr, "last": expr, "l0": int, "embedding_norm": bool, "functions": {name: expr of x}} from a
    one-stream formula; fails on any
    clause it does not understand (so an entry's formula cannot drift into prose this test skips)."""
    spec = {"last": None, "l0": None, "embedding_norm": False, "default": None, "functions": {}}
    labels = {p.label: p for p in registry.REGISTRY.values()}
    for clause in _split_top(formula):
        if m := re.fullmatch(r"(?:the (last) sublayer )?x = (.+)", clause):
            spec["last" if m[1] else "default"] = m[2]
        elif m := re.fullmatch(r"([A-Z]\w*)\(x\) = (.+)", clause):  # a function the formula defines (GPAS)
            spec["functions"][m[1]] = m[2]
        elif re.fullmatch(r"F reads the unscaled x", clause):  # F(x) in the expression says as much
            pass
        elif re.fullmatch(r"x_0 = N\(embeddings\)", clause):
            spec["embedding_norm"] = True
        elif m := re.fullmatch(r"l = (\d+)\.\.L the block's position", clause):
            spec["l0"] = int(m[1])
        elif clause == "x_in the block's input":
            pass
        elif clause in labels:  # another entry's label: its formula for the other sublayers
            spec["default"] = _parse(labels[clause].formula)["default"]
        else:
            pytest.fail(f"unparsed formula clause {clause!r} of {formula!r}")
    assert spec["default"] is not None, formula
    return spec


def _python(expr):
    """The formula's expression as Python: implicit products ("alpha x", "SiLU(alpha) sg(x)") made explicit,
    `lambda` renamed."""
    expr = re.sub(r"\b(alpha_DN|alpha|omega|lambda) (?=[\w(])", r"\1 * ", expr)
    return re.sub(r"\) (?=[\w(])", ") * ", expr).replace("lambda", "lam")


def _one_stream_plain_entries():
    """Layer placements on one stream whose branches are the plain attention and MLP (no norm or scale inside F):
    their block is recomputed from the formula alone."""
    plain = lambda w: not (w.qkv_norm or w.inner_norm or w.head_scale or w.hypersphere or w.hyper)
    return [
        p
        for p in registry.LAYER_PLACEMENTS
        if registry.get(p).stream_kind == "one" and all(plain(w) for w in registry.get(p).wirings.values())
    ]


PLAIN = _one_stream_plain_entries()


def test_the_formula_checked_entries_cover_the_core_placements():
    core = {"post", "pre", "sandwich", "peri_ln", "deepnorm", "admin", "rezero", "lns", "keel", "b2t"}
    assert core <= set(PLAIN), core - set(PLAIN)


@pytest.mark.parametrize("name", PLAIN)
def test_block_computes_its_registry_formula(name, x64):
    entry = registry.get(name)
    spec = _parse(_expanded(entry.formula))
    model = tiny_model(placement=name, num_layers=3, param_dtype="float64", dtype="float64")
    rng = np.random.default_rng(zlib.crc32(name.encode()))

    def perturb(path, v):  # distinct norms, gates and omegas, so a swapped or missing one shows
        if re.search(r"norm2?/scale$|omega$|gate$", path):
            return rng.uniform(0.3, 1.5, v.shape)
        if re.search(r"norm2?/bias$", path):
            return rng.normal(0.0, 0.2, v.shape)
        return None

    _set_params(model, perturb)
    params = _layer_params(model)
    x0 = rng.normal(size=(2, 5, 16))
    for l, p in enumerate(params):
        block = model.stacks["decoder"].block(l)
        x = x_in = x0
        subs = ("attn", "ffn")
        for i, sub_name in enumerate(subs):
            expr = spec["last"] if spec["last"] and i == len(subs) - 1 else spec["default"]
            named = {"norm"} if re.search(r"\bN1?\(", expr) else set()
            named |= {"norm2"} if re.search(r"\bN2\(", expr) else set()
            present = {k.split("/")[1] for k in p if k.startswith(f"{sub_name}/norm")}
            assert present == named, f"{name} block {l} {sub_name}: norms {present}, formula names {named}"
            sub = getattr(block, sub_name)
            wiring = entry.wiring(sub_name)
            gate = p.get("gate", p.get(f"{sub_name}/gate"))
            ns = {
                "x": x,
                "x_in": x_in,
                "F": lambda h, s=sub_name, p=p: BRANCH[s](h, p),
                "N": lambda z, s=sub_name, p=p: _ln(z, p, f"{s}/norm"),
                "N1": lambda z, s=sub_name, p=p: _ln(z, p, f"{s}/norm"),
                "N2": lambda z, s=sub_name, p=p: _ln(z, p, f"{s}/norm2"),
                # alpha: the learned gate where the wiring has one (ReZero, SkipInit), else DeepNorm's constant
                "alpha": gate if wiring.gate != "none" else sub.alpha,
                "lam": gate,
                "omega": p.get(f"{sub_name}/omega"),
                "alpha_DN": sub.alpha,
                "sqrt": np.sqrt,
                "SiLU": lambda a: a / (1 + np.exp(-a)),
                "sg": lambda z: z,  # the stop-gradient: the identity in a forward pass
                "l": None if spec["l0"] is None else spec["l0"] + l,
            }
            for fname, body in spec["functions"].items():
                ns[fname] = lambda z, body=body, ns=ns: eval(_python(body), {"__builtins__": {}}, ns | {"x": z})  # noqa: S307
            x = eval(_python(expr), {"__builtins__": {}}, ns)  # noqa: S307 (the registry's own formula text)
        got = np.asarray(normjax.block_fn(model, l)(jnp.asarray(x0)))
        np.testing.assert_allclose(got, x, rtol=1e-10, atol=1e-10, err_msg=f"{name} block {l}")
    emb = model.embedders["decoder"]
    assert (emb.norm is not None) == spec["embedding_norm"]
    if spec["embedding_norm"]:  # x_0 = N(embeddings)
        tokens = model_inputs(model.cfg)[0]
        e = np.asarray(emb.table.embedding[...])[np.asarray(tokens)] * math.sqrt(16)
        e = e + np.asarray(emb.positions[...])[: tokens.shape[1]]
        pe = {k: np.asarray(v) for k, v in (("n/scale", emb.norm.scale[...]), ("n/bias", emb.norm.bias[...]))}
        np.testing.assert_allclose(normjax.embed(model, tokens), _ln(e, pe, "n"), rtol=1e-10, atol=1e-10)


# -- 3. no norm kind aliases another ---------------------------------------------------------------------------------
Z = np.random.default_rng(3).normal(loc=0.4, scale=1.7, size=(4, 8)).astype(np.float32)


def _randomized(kind, seed_of=lambda path: zlib.crc32(path.encode())):
    """make_norm(kind, 8) with every parameter drawn from a seed of its name: two kinds that were one class would
    draw the same values and compute the same function."""
    norm = normjax.make_norm(kind, 8)
    for path, var in nnx.to_flat_state(nnx.state(norm, nnx.Param)):
        name = "/".join(map(str, path))
        value = np.random.default_rng(seed_of(name)).uniform(0.5, 1.5, var[...].shape)
        var.set_value(jnp.asarray(value, var[...].dtype))
    return norm


def test_every_norm_kind_is_its_own_function():
    z = jnp.asarray(Z)
    # at init ScaleNorm is RMSNorm but for where eps enters (eps vs eps / d): a large eps tells them apart
    for label, make in (("init", lambda k: normjax.make_norm(k, 8, eps=0.5)), ("random", _randomized)):
        outs = {k: np.asarray(make(k)(z)) for k in NORM_KINDS}
        for i, a in enumerate(NORM_KINDS):
            for b in NORM_KINDS[i + 1 :]:
                gap = float(np.abs(outs[a] - outs[b]).max())
                assert gap > 1e-2, f"{label}: norm {a!r} computes {b!r} (max difference {gap:.2e})"


@pytest.mark.parametrize("kind", NORM_KINDS)
def test_model_norms_are_the_configured_kind(kind):
    """The config's kind reaches every norm of the model (no site keeps a default kind)."""
    model = tiny_model(placement="sandwich", norm=kind, qk_norm=True, embedding_norm=True, num_layers=1)
    want_cls = type(normjax.make_norm(kind, 8))
    sites = [m for _, m in nnx.iter_graph(model) if isinstance(m, nnx.Module) and type(m).__module__ == "normjax.norms"]
    if kind == "none":  # identities only (the final and embedding norms are dropped)
        assert {type(m) for m in sites} <= {want_cls}
        return
    # 2 per sublayer (sandwich), q and k in the attention, the embedding and the final norm
    assert len(sites) == 2 * 2 + 2 + 2 and {type(m) for m in sites} == {want_cls}
    z = jnp.asarray(np.tile(Z, 2))
    np.testing.assert_array_equal(model.stacks["decoder"].block(0).attn.norm2(z), normjax.make_norm(kind, 16)(z))


NEAR_MISSES = ["LayerNorm", "layer_norm", "RMSNorm", "rms_norm", "scale_norm", "DyT", "erf", " layernorm", "", "ln"]


@pytest.mark.parametrize("kind", NEAR_MISSES)
def test_unknown_norm_kinds_are_refused_not_defaulted(kind):
    with pytest.raises(ValueError, match=f"unknown norm kind {re.escape(repr(kind))}.*layernorm"):
        normjax.make_norm(kind, 8)
    with pytest.raises(ValueError, match=f"ModelConfig.norm={re.escape(repr(kind))}"):
        normjax.ModelConfig(norm=kind)


def test_a_model_built_past_validation_refuses_an_unknown_kind():
    cfg = normjax.ModelConfig(d_model=16, num_heads=2, d_ff=24, vocab_size=23, num_layers=1)
    object.__setattr__(cfg, "norm", "batchnorm")  # a config edited after validation (or unpickled from elsewhere)
    with pytest.raises(ValueError, match="unknown norm kind 'batchnorm'"):
        normjax.Transformer(cfg, rngs=nnx.Rngs(0))
