"""ModelConfig: the typed, validated description of one Transformer."""

from __future__ import annotations

import dataclasses
import math

from normjax import hyper, registry
from normjax.norms import GAINS, NORM_KINDS

ARCHS = ("decoder", "encoder", "encoder_decoder")
PLACEMENTS = registry.PLACEMENTS
LAYER_PLACEMENTS = registry.LAYER_PLACEMENTS
NORMS = NORM_KINDS
ACTIVATIONS = ("relu", "gelu")
POS_ENCODINGS = ("sinusoidal", "learned")
BRANCH_SCALINGS = ("none", "gpt2")
DTYPES = ("float32", "float64", "bfloat16", "float16")
NORM_GAINS = GAINS
QK_NORM_SCOPES = ("head", "full")
DYT_SITES = ("attn", "ffn", "final")  # the norm sites with their own DyT / Derf alpha_0
ATTN_GATES = (None, "headwise", "elementwise")  # gated attention (Qiu et al. 2025): off, one gate per head / channel


def _fail(field: str, value, expected: str):
    raise ValueError(f"ModelConfig.{field}={value!r} is invalid: {expected}")


def _check_choice(field: str, value, choices):
    if value not in choices:
        _fail(field, value, f"valid choices are {', '.join(map(repr, choices))}")


def _check_number(field: str, value, lo: float, lo_open: bool = False, hi: float | None = None, expected: str = ""):
    """A finite int or float (never a bool) in [lo, hi], or (lo, hi] with lo_open."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > lo if lo_open else value >= lo) and (hi is None or value <= hi)
    if not ok:
        _fail(field, value, expected)


def _check_bool(field: str, value, allow_none: bool = False):
    if not (isinstance(value, bool) or (allow_none and value is None)):
        _fail(field, value, "must be True or False" + (" (or None for auto)" if allow_none else ""))


def _check_positive_int(field: str, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        _fail(field, value, "must be a positive integer")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """One Transformer: topology, placement, norm kind and init rules.

    `placement` is a name from the placement registry (`normjax.registry`) or a tuple with one name per layer
    (encoder layers first, then decoder layers, for `encoder_decoder`; `resi_dual`, whose blocks carry two
    streams, for all layers of a stack or none). `norm_bias=False` drops LayerNorm's and
    DyT's beta; `qk_norm=True` adds a per-head norm of queries and keys to every attention, whatever the
    placement; `embedding_norm=True` normalises the embeddings before the first block. Invalid values raise
    `ValueError` naming the field, the value and the valid choices. `theory=True` is Xiong et al.'s analysis
    setting: one head, W^Q = W^K = 0, weights N(0, 1/fan_in), zero biases, gamma = 1, beta = 0.

    Options of 2024-26 recipes (docs/placements.md): `norm_gain` "zero_centred" (gamma = 1 + g, g = 0 at init, Gemma)
    or "none" (weightless norms, modded-nanogpt); `qk_norm_scope="full"` normalises q and k over d_model before the
    head split (OLMo 2); `dyt_alpha_{attn,ffn,final}` are DyT's / Derf's per-site alpha_0 (None = `dyt_alpha`);
    `attn_logit_softcap` / `final_logit_softcap` c give c tanh(logits / c) (Gemma 2: 50, 30); `qkv_clip` c clamps
    q, k, v to [-c, c] after their projections (OLMo); `z_loss` is the coefficient of log(Z)^2 in the training loss
    (PaLM 1e-4, OLMo 2 1e-5); `branch_multiplier_alpha` multiplies every branch output by (L / L_base)^-alpha, L the
    stack depth and L_base `branch_multiplier_base_depth` (CompleteP alpha = 1, depth-muP alpha = 1/2).

    Hyper-connections (`shc`, `dhc`, `mhc`, `mhc_lite`): `hyper_streams` is the number n of residual streams (None =
    4, the papers' n), `sinkhorn_iters` mHC's Sinkhorn-Knopp iterations (None = 20), `sinkhorn_order` the order of
    each round's two steps (None = "paper": columns, then rows, Xie et al. eq. 9; "lucidrains": rows, then columns);
    each is refused where no layer reads it.

    The modded-nanogpt speedrun's skips (`normjax.skips`, docs/placements.md): `value_residual` mixes every self
    attention's values with block 0's, v = (1 - lam_l) v + lam_l v_1 (lam_l = 0.5 at init); `x0_lambdas` starts
    every block with x = a_l x + c_l x_0, x_0 the stack's embedding output (a_l = 1, c_l = 0 at init). Blocks then
    map a `normjax.skips.SkipStream`; refused with ResiDual, hyper-connections and ngpt.

    `attn_gate` ("headwise" | "elementwise", None = off) is gated attention (Qiu et al. 2025, Qwen3-Next): every
    attention's SDPA output times sigmoid(x W_g + b_g) before the output projection (`normjax.layers.Attention`).
    """

    arch: str = "decoder"
    vocab_size: int = 256
    d_model: int = 64
    num_heads: int = 4
    d_ff: int = 256
    num_layers: int = 2
    num_decoder_layers: int | None = None  # encoder_decoder only; None = num_layers
    placement: str | tuple[str, ...] = "pre"
    norm: str = "layernorm"
    norm_eps: float = 1e-5
    norm_bias: bool = True  # False: LayerNorm / DyT without beta (nanodo, PaLM)
    qk_norm: bool = False  # per-head norm of queries and keys (Dehghani et al. 2023), any placement
    embedding_norm: bool = False  # a norm after the embeddings (peri_ln has it by default)
    final_norm: bool | None = None  # None = auto: on when the last layer's placement needs it
    activation: str = "relu"
    dropout: float = 0.0
    max_len: int = 512
    pos_encoding: str = "sinusoidal"
    tie_embeddings: bool = True
    branch_scaling: str = "none"  # "gpt2": scale branch output projections by 1/sqrt(#sublayers)
    scan_layers: bool = False
    remat: bool = False
    dtype: str = "float32"
    param_dtype: str = "float32"
    theory: bool = False
    mixln_fraction: float = 0.25  # mixln: post for the first floor(fraction * L) layers, pre after
    rezero_per_sublayer: bool = False  # rezero: one alpha per sublayer instead of one per layer
    layerscale_init: float | None = None  # None = CaiT's rule by depth (0.1 / 1e-5 / 1e-6)
    dyt_alpha: float = 0.5
    deepnorm_alpha: float | None = None  # None = paper value for this topology
    deepnorm_beta: float | None = None
    admin_omega: float | None = None  # None = closed form sqrt((N+1)/ln(N+1) - 1)
    norm_gain: str = "one"  # "one" | "zero_centred" (1 + g, g = 0) | "none" (no gamma)
    qk_norm_scope: str = "head"  # "head" (width d_model / H) | "full" (width d_model, before the head split)
    dyt_alpha_attn: float | None = None  # DyT / Derf alpha_0 of the attention sublayers' norms; None = dyt_alpha
    dyt_alpha_ffn: float | None = None  # ... of the FFN sublayers' norms
    dyt_alpha_final: float | None = None  # ... of the final norm
    attn_logit_softcap: float | None = None  # c tanh(logits / c) on attention logits (Gemma 2: 50)
    final_logit_softcap: float | None = None  # c tanh(logits / c) on the output logits (Gemma 2: 30)
    qkv_clip: float | None = None  # clamp q, k, v to [-c, c] after their projections (OLMo clip_qkv)
    z_loss: float = 0.0  # coefficient of log(Z)^2 in the training loss (PaLM 1e-4, OLMo 2 1e-5)
    branch_multiplier_alpha: float | None = (
        None  # branch outputs times (L / L_base)^-alpha (CompleteP 1, depth-muP 1/2)
    )
    branch_multiplier_base_depth: int = 1  # L_base
    hyper_streams: int | None = None  # n residual streams of shc / dhc / mhc / mhc_lite; None = 4
    sinkhorn_iters: int | None = None  # mhc's Sinkhorn-Knopp iterations t_max; None = 20
    sinkhorn_order: str | None = None  # mhc's step order: None = "paper" (rows last), "lucidrains" (columns last)
    value_residual: bool = False  # speedrun: v = (1 - lam_l) v + lam_l v_1 in every self attention, lam_l = 0.5
    x0_lambdas: bool = False  # speedrun: x = a_l x + c_l x_0 at every block's start, (a_l, c_l) = (1, 0)
    attn_gate: str | None = None  # gated attention: SDPA output times sigmoid(x W_g + b_g) per head / channel

    def __post_init__(self):
        _check_choice("arch", self.arch, ARCHS)
        for name in ("vocab_size", "d_model", "num_heads", "d_ff", "num_layers", "max_len"):
            _check_positive_int(name, getattr(self, name))
        if self.num_decoder_layers is not None:
            if self.arch != "encoder_decoder":
                _fail(
                    "num_decoder_layers",
                    self.num_decoder_layers,
                    "only encoder_decoder has a separate decoder depth; leave it None",
                )
            _check_positive_int("num_decoder_layers", self.num_decoder_layers)
        if self.d_model % self.num_heads:
            _fail("num_heads", self.num_heads, f"must divide d_model={self.d_model}")
        self._check_placement()
        _check_choice("norm", self.norm, NORMS)
        for name in ("norm_bias", "qk_norm", "embedding_norm"):
            if not isinstance(getattr(self, name), bool):
                _fail(name, getattr(self, name), "must be True or False")
        _check_choice("activation", self.activation, ACTIVATIONS)
        _check_choice("pos_encoding", self.pos_encoding, POS_ENCODINGS)
        _check_choice("branch_scaling", self.branch_scaling, BRANCH_SCALINGS)
        _check_choice("dtype", self.dtype, DTYPES)
        _check_choice("param_dtype", self.param_dtype, DTYPES)
        _check_number("norm_eps", self.norm_eps, 0.0, expected="must be a finite number >= 0")
        _check_number("dropout", self.dropout, 0.0, hi=1.0, expected="must be in [0, 1)")
        if self.dropout == 1:
            _fail("dropout", self.dropout, "must be in [0, 1)")
        _check_number("mixln_fraction", self.mixln_fraction, 0.0, hi=1.0, expected="must be in [0, 1]")
        for name in ("deepnorm_alpha", "deepnorm_beta", "admin_omega", "dyt_alpha"):
            value = getattr(self, name)
            if value is not None:
                _check_number(
                    name, value, 0.0, lo_open=True, expected="must be a finite positive number (or None: paper)"
                )
        self._check_recipe_options()
        if self.layerscale_init is not None:
            _check_number("layerscale_init", self.layerscale_init, 0.0, expected="must be finite and >= 0 (or None)")
        for name in ("tie_embeddings", "scan_layers", "remat", "theory", "rezero_per_sublayer"):
            _check_bool(name, getattr(self, name))
        _check_bool("final_norm", self.final_norm, allow_none=True)
        self._check_streams()
        self._check_skips()
        self._check_attn_gate()
        for stack in self.stacks:
            if self.final_norm is False and self.has_dual_stream(stack):
                _fail("final_norm", False, "a two-stream output (resi_dual, siamese) needs its norm; use None or True")
        self._check_ngpt()
        if self.theory and self.num_heads != 1:
            _fail("num_heads", self.num_heads, "theory=True is Xiong et al.'s single-head setting; use 1")
        if self.scan_layers:
            for stack in self.stacks:
                if len(set(self.layer_placements(stack))) > 1:
                    _fail(
                        "scan_layers",
                        True,
                        f"needs one placement for every {stack} layer; "
                        f"got {self.layer_placements(stack)} (use scan_layers=False)",
                    )

    def _check_placement(self):
        total = self.num_layers + (self.decoder_layers if self.arch == "encoder_decoder" else 0)
        if isinstance(self.placement, str):
            _check_choice("placement", self.placement, PLACEMENTS)
            return
        if not isinstance(self.placement, tuple | list):
            _fail("placement", self.placement, "must be a name or a tuple of names, one per layer")
        if len(self.placement) != total:
            _fail(
                "placement",
                self.placement,
                f"a per-layer tuple needs {total} entries (one per layer, encoder first), got {len(self.placement)}",
            )
        for name in self.placement:
            if name not in LAYER_PLACEMENTS:
                _fail("placement", name, f"per-layer entries must be one of {LAYER_PLACEMENTS}")
        object.__setattr__(self, "placement", tuple(self.placement))

    def _check_streams(self):
        """One stream kind per stack (ResiDual's pair, n hyper-connection streams, or one); n and t_max where read."""
        layers = {p for stack in self.stacks for p in self.layer_placements(stack)}
        for stack in self.stacks:
            kinds = {registry.get(p).stream_kind: p for p in self.layer_placements(stack)}
            if len(kinds) > 1:
                which = ", ".join(f"{p} carries {k!r}" for k, p in kinds.items())
                _fail("placement", self.placement, f"the {stack} stack mixes stream kinds ({which}); one per stack")
            if len({registry.get(p).stream_norms for p in self.layer_placements(stack)}) > 1:
                _fail("placement", self.placement, f"the {stack} stack mixes resi_dual's and siamese's read-outs")
        read_by = (("hyper_streams", hyper.HYPER_KINDS), ("sinkhorn_iters", ("mhc",)), ("sinkhorn_order", ("mhc",)))
        for name, readers in read_by:
            value = getattr(self, name)
            if value is None:
                continue
            if name == "sinkhorn_order":
                _check_choice(name, value, hyper.SINKHORN_ORDERS)
            else:
                _check_positive_int(name, value)
            if not layers & set(readers):
                _fail(name, value, f"is read only by placements {', '.join(readers)}; leave it None")

    def _check_skips(self):
        """The speedrun's value residual and x0 lambdas: one residual stream of sums (not ResiDual, HC or ngpt)."""
        for name in ("value_residual", "x0_lambdas"):
            _check_bool(name, getattr(self, name))
            if not getattr(self, name):
                continue
            if self.placement == "ngpt":
                _fail(name, True, "ngpt keeps its stream on the unit sphere and defines no such skip; leave it off")
            for stack in self.stacks:
                if self.stream_kind(stack) != "one":
                    _fail(
                        name,
                        True,
                        f"the speedrun's skips are defined on one residual stream; the {stack} stack carries "
                        f"{self.stream_kind(stack)!r} streams (ResiDual / hyper-connections); leave it off",
                    )

    def _check_attn_gate(self):
        """Gated attention (Qiu et al. 2025): a choice, refused where the published form does not define it."""
        _check_choice("attn_gate", self.attn_gate, ATTN_GATES)
        if self.attn_gate is not None and self.placement == "ngpt":
            _fail("attn_gate", self.attn_gate, "ngpt's attention has no such gate; use None")
        if self.attn_gate is not None and self.theory:
            _fail("attn_gate", self.attn_gate, "theory=True is Xiong et al.'s setting, which has no gate; use None")

    @property
    def has_skips(self) -> bool:
        """Whether blocks map a `normjax.skips.SkipStream` (value residual or x0 lambdas on)."""
        return self.value_residual or self.x0_lambdas

    def _check_recipe_options(self):
        """The 2024-26 recipe knobs: gains, QK-norm scope, per-site alpha_0, soft-caps, clipping, z-loss, multiplier."""
        _check_choice("norm_gain", self.norm_gain, NORM_GAINS)
        if self.norm_gain != "one" and self.norm in ("scalenorm", "none"):
            _fail("norm_gain", self.norm_gain, f"norm {self.norm!r} has no per-channel gamma; use 'one'")
        _check_choice("qk_norm_scope", self.qk_norm_scope, QK_NORM_SCOPES)
        if self.qk_norm_scope == "full":
            if not self.qk_norm:
                _fail("qk_norm_scope", "full", "sets where qk_norm normalises; set qk_norm=True")
            layers = {p for stack in self.stacks for p in self.layer_placements(stack)}
            per_head = sorted(
                p for p in layers if any({"q", "k"} & set(w.qkv_norm) for w in registry.get(p).wirings.values())
            )
            if per_head:
                _fail(
                    "qk_norm_scope",
                    "full",
                    f"placement {per_head[0]!r} already normalises q and k per head; use 'head'",
                )
        for site in DYT_SITES:
            name = f"dyt_alpha_{site}"
            value = getattr(self, name)
            if value is None:
                continue
            _check_number(name, value, 0.0, lo_open=True, expected="must be a finite positive number (or None)")
            if self.norm not in ("dyt", "derf"):
                _fail(name, value, f"is DyT's / Derf's alpha_0; norm {self.norm!r} has none (use norm='dyt' or 'derf')")
        for name in ("attn_logit_softcap", "final_logit_softcap", "qkv_clip", "branch_multiplier_alpha"):
            value = getattr(self, name)
            if value is not None:
                _check_number(
                    name, value, 0.0, lo_open=True, expected="must be a finite positive number (or None: off)"
                )
        _check_number("z_loss", self.z_loss, 0.0, expected="must be a finite number >= 0 (0: off)")
        _check_positive_int("branch_multiplier_base_depth", self.branch_multiplier_base_depth)
        if self.branch_multiplier_alpha is None and self.branch_multiplier_base_depth != 1:
            _fail("branch_multiplier_base_depth", self.branch_multiplier_base_depth, "needs branch_multiplier_alpha")

    def _check_ngpt(self):
        """nGPT is a whole model on the hypersphere: refuse settings its published form does not define."""
        if isinstance(self.placement, tuple) and "ngpt" in self.placement:
            _fail("placement", self.placement, "ngpt is a whole model (weights renormalised); use placement='ngpt'")
        if self.placement != "ngpt":
            return
        if self.arch == "encoder_decoder":
            _fail(
                "arch",
                self.arch,
                "ngpt is defined for decoder-only models (and, unchanged, encoders); the paper "
                "and NVIDIA/ngpt define no cross attention",
            )
        for name, bad in (("qk_norm", True), ("embedding_norm", True), ("final_norm", True), ("theory", True)):
            if getattr(self, name) is bad:
                _fail(name, bad, "ngpt has no norm modules and its own init; leave it off")
        if self.branch_scaling != "none":
            _fail("branch_scaling", self.branch_scaling, "ngpt renormalises every weight matrix; use 'none'")
        if self.branch_multiplier_alpha is not None:
            _fail("branch_multiplier_alpha", self.branch_multiplier_alpha, "ngpt's update is no residual sum; use None")
        # knobs ngpt never reads: refused rather than silently ignored
        if self.norm not in ("layernorm", "none"):
            _fail("norm", self.norm, "ngpt has no norm modules (unit vectors, no eps); leave the default or 'none'")
        if self.activation != "relu":
            _fail("activation", self.activation, "ngpt's MLP is SwiGLU (u * SiLU(v)); leave the default")
        if not self.norm_bias or self.norm_gain != "one":
            name, value = ("norm_bias", False) if not self.norm_bias else ("norm_gain", self.norm_gain)
            _fail(name, value, "ngpt has no norm modules; leave the default")

    @property
    def decoder_layers(self) -> int:
        """Depth of the seq2seq decoder (num_decoder_layers, defaulting to num_layers)."""
        return self.num_decoder_layers or self.num_layers

    @property
    def stacks(self) -> tuple[str, ...]:
        """The stack names of this topology, in call order."""
        return {"decoder": ("decoder",), "encoder": ("encoder",), "encoder_decoder": ("encoder", "decoder")}[self.arch]

    def stack_depth(self, stack: str) -> int:
        """Number of blocks in `stack`."""
        _check_choice("stack", stack, self.stacks)
        if self.arch == "encoder_decoder" and stack == "decoder":
            return self.decoder_layers
        return self.num_layers

    def has_cross_attention(self, stack: str) -> bool:
        return self.arch == "encoder_decoder" and stack == "decoder"

    def sublayers_per_block(self, stack: str) -> int:
        return 3 if self.has_cross_attention(stack) else 2

    def layer_placements(self, stack: str) -> tuple[str, ...]:
        """One placement name per block of `stack` (recipes such as mixln resolved per layer)."""
        depth = self.stack_depth(stack)
        if isinstance(self.placement, tuple):
            offset = self.num_layers if (self.arch == "encoder_decoder" and stack == "decoder") else 0
            return self.placement[offset : offset + depth]
        entry = registry.get(self.placement)
        return entry.layers(self, depth) if entry.is_recipe else (self.placement,) * depth

    def has_final_norm(self, stack: str) -> bool:
        """Whether `stack` ends with a norm (auto: the last block leaves the stream un-normalized)."""
        if self.norm == "none":
            return False
        if self.final_norm is not None:
            return self.final_norm
        return registry.get(self.layer_placements(stack)[-1]).final_norm

    def has_dual_stream(self, stack: str) -> bool:
        """Whether `stack` carries ResiDual's two streams (its blocks map a `normjax.DualStream`)."""
        return registry.get(self.layer_placements(stack)[0]).dual_stream

    def stream_kind(self, stack: str) -> str:
        """ "dual" (ResiDual), "hyper" (hyper-connections) or "one": what `stack`'s blocks map."""
        return registry.get(self.layer_placements(stack)[0]).stream_kind

    def num_streams(self, stack: str) -> int:
        """The residual streams `stack` carries: n for hyper-connections, 2 for ResiDual, else 1."""
        kind = self.stream_kind(stack)
        if kind == "hyper":
            return self.hyper_streams or hyper.DEFAULT_STREAMS
        return 2 if kind == "dual" else 1

    @property
    def num_sinkhorn_iters(self) -> int:
        """mHC's Sinkhorn-Knopp iterations (`sinkhorn_iters`, default 20)."""
        return self.sinkhorn_iters or hyper.DEFAULT_SINKHORN_ITERS

    @property
    def sinkhorn_step_order(self) -> str:
        """mHC's Sinkhorn-Knopp step order (`sinkhorn_order`, default "paper": Xie et al. eq. 9, rows last)."""
        return self.sinkhorn_order or hyper.SINKHORN_ORDERS[0]

    def has_embedding_norm(self, stack: str) -> bool:
        """Whether `stack`'s embeddings are normalised (the config's switch, or a placement such as peri_ln)."""
        if self.norm == "none":
            return False
        return self.embedding_norm or any(registry.get(p).embedding_norm for p in self.layer_placements(stack))

    def norm_alpha(self, site: str | None = None) -> float:
        """DyT's / Derf's alpha_0 at `site` ("attn", "ffn", "final"; None: any other norm): its own or dyt_alpha."""
        value = None if site is None else getattr(self, f"dyt_alpha_{site}")
        return self.dyt_alpha if value is None else value

    def branch_multiplier(self, stack: str) -> float:
        """The forward multiplier (L / L_base)^-alpha on every branch output of `stack` (1 when off)."""
        if self.branch_multiplier_alpha is None:
            return 1.0
        return (self.stack_depth(stack) / self.branch_multiplier_base_depth) ** -self.branch_multiplier_alpha

    def replace(self, **changes) -> ModelConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
