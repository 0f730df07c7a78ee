"""Study model specs: a placement with an optional norm kind and norm options, e.g. "pre:scalenorm+qk_norm"."""

# Syntax: "<placement>[:<norm>][+<option>...]". The placement is a registry name, the norm a `ModelConfig.norm`
# kind (default layernorm), each option one of OPTIONS: "qk_norm" (ModelConfig.qk_norm=True), "no_bias"
# (norm_bias=False), "embedding_norm" (embedding_norm=True). A spec whose norm or option would change nothing
# (no_bias on a bias-free norm kind, embedding_norm on peri_ln, qk_norm where q and k are already normalised,
# any option with norm "none") is refused: the studies never show a relabelled copy of another run.

from __future__ import annotations

import dataclasses

from normjax import registry
from normjax.config import NORMS, ModelConfig

OPTIONS = {"qk_norm": {"qk_norm": True}, "no_bias": {"norm_bias": False}, "embedding_norm": {"embedding_norm": True}}
BIASED_NORMS = ("layernorm", "dyt")  # the kinds with an additive beta
SYNTAX = "'<placement>[:<norm>][+<option>...]'"
# The option variants each study's `:paper` preset adds to its registry placements (`study_specs`). no_bias is
# only in deep_training: beta = 0 at init, so at init a model without beta is the same model as with it.
_INIT_VARIANTS = ("pre+qk_norm", "pre:scalenorm", "pre+embedding_norm")
PAPER_VARIANTS = {
    "hidden_norms": _INIT_VARIANTS,
    "jacobian_spectrum": _INIT_VARIANTS,
    "grad_norms_at_init": _INIT_VARIANTS,
    "deep_training": ("pre:scalenorm", "pre+qk_norm", "post+no_bias", "pre+embedding_norm"),
}


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
    if options and norm == "none":
        return "norm 'none' makes every norm option a no-op"
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
    return None


def parse(text: str) -> ModelSpec:
    """Parses and validates a spec.

    Raises:
      ValueError: one line naming the spec, what is wrong, and the valid placements, norms and options.
    """

    def fail(reason: str):
        raise ValueError(
            f"invalid model spec {text!r}: {reason}; use {SYNTAX} with a placement in "
            f"{', '.join(registry.PLACEMENTS)}, a norm in {', '.join(NORMS)} and options from {', '.join(OPTIONS)}"
        )

    if not isinstance(text, str):
        fail("not a string")
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


def study_specs(study: str) -> tuple[str, ...]:
    """A study's `:paper` list: the registry placements that list it, then its PAPER_VARIANTS."""
    return registry.study_placements(study) + PAPER_VARIANTS.get(study, ())
