"""Study model specs: a placement with an optional norm kind and norm options, e.g. "pre:scalenorm+qk_norm"."""

# Syntax: "<placement>[:<norm>][+<option>...]". The placement is a registry name, the norm a `ModelConfig.norm`
# kind (default layernorm), each option one of OPTIONS: "qk_norm" (ModelConfig.qk_norm=True), "no_bias"
# (norm_bias=False), "embedding_norm" (embedding_norm=True), the recipe knobs (full-width QK-norm, zero-centred
# or no gain, soft-caps, z-loss) and the speedrun's value residual and x0 lambdas; RECIPES names whole recipes
# ("olmo2", "gemma2", "gemma3", "speedrun"), each a spec in this syntax. Options that set one field to two values
# are refused. A spec whose norm or option would change nothing (no_bias on a bias-free norm kind, embedding_norm
# on peri_ln, qk_norm where q and k are already normalised, any norm option with norm "none") is refused: the
# studies never show a relabelled copy of another run.

from __future__ import annotations

import dataclasses

from normjax import registry
from normjax.config import NORMS, ModelConfig

OPTIONS = {
    "qk_norm": {"qk_norm": True},
    "no_bias": {"norm_bias": False},
    "embedding_norm": {"embedding_norm": True},
    "qk_norm_full": {"qk_norm": True, "qk_norm_scope": "full"},  # OLMo 2: q, k normalised over d_model
    "zero_gain": {"norm_gain": "zero_centred"},  # Gemma: gamma = 1 + g, g = 0
    "no_gain": {"norm_gain": "none"},  # modded-nanogpt: F.rms_norm without weight
    "softcap": {"attn_logit_softcap": 50.0, "final_logit_softcap": 30.0},  # Gemma 2
    "final_softcap": {"final_logit_softcap": 15.0},  # modded-nanogpt's tanh cap (30, then 15)
    "z_loss": {"z_loss": 1e-5},  # OLMo 2's coefficient (OLMo-core z_loss_multiplier=1e-5)
    "value_residual": {"value_residual": True},  # modded-nanogpt: v = (1 - lam) v + lam v_1, lam = 0.5
    "x0_lambdas": {"x0_lambdas": True},  # modded-nanogpt: x = a x + c x_0 per block, (a, c) = (1, 0)
}
BIASED_NORMS = ("layernorm", "dyt", "derf")  # the kinds with an additive beta
GAINED_NORMS = ("layernorm", "rmsnorm", "dyt", "derf")  # the kinds with a per-channel gamma
# Named recipes: one flag compares them. Each is a spec above; `parse(name)` keeps the name as the spec's text.
RECIPES = {
    # OLMo 2 (Team OLMo 2024): reordered norm x + N(F(x)), RMSNorm, full-width QK-norm, z-loss 1e-5
    "olmo2": "branch_post:rmsnorm+qk_norm_full+z_loss",
    # Gemma 2: x + N2(F(N1(x))) with zero-centred RMSNorm, soft-caps 50 (attention) and 30 (final)
    "gemma2": "sandwich:rmsnorm+zero_gain+softcap",
    # Gemma 3: the same with per-head QK-norm instead of soft-caps
    "gemma3": "sandwich:rmsnorm+zero_gain+qk_norm",
    # modded-nanogpt: weightless RMSNorm (embeddings, blocks, q/k per head, final), final-logit soft-cap 15,
    # value residual and x0 lambdas (the 2024-11-06 record's learnable lamb and lambdas)
    "speedrun": "pre:rmsnorm+no_gain+qk_norm+embedding_norm+final_softcap+value_residual+x0_lambdas",
}
SYNTAX = "'<placement>[:<norm>][+<option>...]'"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One parsed spec: `fields` are the ModelConfig keyword arguments it sets."""

    text: str
    placement: str
    norm: str
    options: tuple[str, ...]

    @property
    def fields(self) -> dict:
        """{"placement", "norm", and each option's ModelConfig field}."""
        out = {"placement": self.placement, "norm": self.norm}
        for option in self.options:
            out |= OPTIONS[option]
        return out

    @property
    def is_variant(self) -> bool:
        """True for a spec with a norm kind or an option (figures draw it dashed in its placement's colour)."""
        return self.text != self.placement

    @property
    def file_key(self) -> str:
        """The spec as a file-name component (":" becomes "-")."""
        return self.text.replace(":", "-")


def _layer_entries(placement: str) -> list[registry.Placement]:
    entry = registry.get(placement)
    if not entry.is_recipe:
        return [entry]
    return [registry.get(p) for p in ModelConfig(placement=placement, num_layers=8).layer_placements("decoder")]


def _why_not(placement: str, norm: str, options: tuple[str, ...]) -> str | None:
    """Why an option would change nothing (None: every option changes the model)."""
    entries = _layer_entries(placement)
    fields = {}
    for option in options:
        for name, value in OPTIONS[option].items():
            if fields.get(name, (value, option))[0] != value:
                return f"{fields[name][1]!r} and {option!r} both set {name}"
            fields[name] = (value, option)
    norm_options = set(options) - {"softcap", "final_softcap", "z_loss", "value_residual", "x0_lambdas"}
    if norm_options and norm == "none":
        return "norm 'none' makes every norm option a no-op"
    for option in {"zero_gain", "no_gain"} & set(options):
        if norm not in GAINED_NORMS:
            return f"{option} needs a norm kind with a per-channel gain ({', '.join(GAINED_NORMS)}), not {norm!r}"
    if "no_bias" in options:
        if norm not in BIASED_NORMS:
            return f"no_bias needs a norm kind with a bias ({', '.join(BIASED_NORMS)}), not {norm!r}"
        has_norm = any(
            e.final_norm or e.embedding_norm or any(w.norms or w.qkv_norm or w.inner_norm for w in e.wirings.values())
            for e in entries
        )
        if not has_norm and not {"qk_norm", "embedding_norm"} & set(options):
            return f"no_bias: placement {placement!r} has no norm"
    if "embedding_norm" in options and all(e.embedding_norm for e in entries):
        return f"embedding_norm: placement {placement!r} already normalises the embeddings"
    if "qk_norm" in options and all(
        {"q", "k"} <= set(w.qkv_norm) for e in entries for k, w in e.wirings.items() if k != "ffn"
    ):
        return f"qk_norm: placement {placement!r} already normalises queries and keys"
    if "qk_norm_full" in options and any({"q", "k"} & set(w.qkv_norm) for e in entries for w in e.wirings.values()):
        return f"qk_norm_full: placement {placement!r} already normalises queries and keys per head"
    return None


def parse(text: str) -> ModelSpec:
    """Parses and validates a spec.

    Raises:
      ValueError: one line naming the spec, what is wrong, and the valid placements, norms and options.
    """

    def fail(reason: str):
        raise ValueError(
            f"invalid model spec {text!r}: {reason}; use {SYNTAX} with a placement in "
            f"{', '.join(registry.PLACEMENTS)}, a norm in {', '.join(NORMS)} and options from {', '.join(OPTIONS)}, "
            f"or a recipe: {', '.join(RECIPES)}"
        )

    if not isinstance(text, str):
        fail("not a string")
    if text in RECIPES:
        return dataclasses.replace(parse(RECIPES[text]), text=text)
    head, *options = text.split("+")
    placement, colon, norm = head.partition(":")
    if placement not in registry.PLACEMENTS:
        fail(f"unknown placement {placement!r}")
    if colon and norm not in NORMS:
        fail(f"unknown norm {norm!r}")
    for option in options:
        if option not in OPTIONS:
            fail(f"unknown option {option!r}")
    if len(set(options)) != len(options):
        fail("an option is repeated")
    norm = norm or "layernorm"
    if (reason := _why_not(placement, norm, tuple(options))) is not None:
        fail(reason)
    return ModelSpec(text, placement, norm, tuple(options))
