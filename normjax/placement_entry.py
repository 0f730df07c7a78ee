"""A placement registry entry: a placement's wiring per sublayer, norms, gate, final-norm and init rules."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from normjax.placements import Wiring

SUBLAYERS = ("attn", "cross", "ffn")


@dataclasses.dataclass(frozen=True)
class Placement:
    """One placement of the norm in a residual block.

    Attributes:
      name: the `ModelConfig.placement` value.
      label: display name in figures and tables.
      color: its colour in every figure.
      wirings: {"attn", "cross", "ffn"} -> Wiring.
      final_norm: whether a stack ending in this placement gets a final norm (auto mode).
      init: the init rule `(cfg, stack) -> InitRule` (None: the base init).
      embedding_norm: a norm after the embeddings (Peri-LN).
      shared_gate: one scalar gate per block shared by its sublayers (ReZero, GPAS; `rezero_per_sublayer` splits
        it), 0 at init.
      layers: for recipes (mixln, hybrid_star) `(cfg, depth) -> names`, one per-layer placement per block;
        None for a placement that names one wiring per layer.
      formula, notes, reference: the docs table row.
      source: the authors' code it was checked against (file and lines), where there is one.
      dual_stream: the block maps ResiDual's pair of streams (`placements.DualStream`) instead of one stream;
        the stack starts from (x_0, x_0) and outputs x_L + N(d_L) (the final norm acts on d_L). A stack's
        blocks are either all dual-stream or none.
      post_update: `params -> params` the train step applies after every optimizer update (and the model once
        at init); nGPT's weight renormalisation.
      hyper_streams: the block maps n hyper-connection streams (`normjax.HyperStreams`, n = `ModelConfig.
        hyper_streams`); the stack starts from n copies of x_0 and its output is N(sum of the streams).
      stream_norms: a dual-stream stack outputs N(N_a(x_L) + N_b(d_L)) (SiameseNorm: a norm on each stream, the
        final norm on their sum) instead of ResiDual's x_L + N(d_L).
    """

    name: str
    label: str
    color: str
    wirings: dict
    final_norm: bool
    formula: str
    reference: str
    notes: str = ""
    init: Callable | None = None
    embedding_norm: bool = False
    shared_gate: bool = False
    layers: Callable | None = None
    source: str = ""
    dual_stream: bool = False
    post_update: Callable | None = None
    hyper_streams: bool = False
    stream_norms: bool = False

    @property
    def stream_kind(self) -> str:
        """ "dual" (ResiDual's pair), "hyper" (n hyper-connection streams) or "one"."""
        return "dual" if self.dual_stream else "hyper" if self.hyper_streams else "one"

    def wiring(self, sublayer: str) -> Wiring:
        """The wiring of `sublayer` ("attn", "cross" or "ffn")."""
        return self.wirings[sublayer]

    @property
    def is_recipe(self) -> bool:
        """True when the placement resolves to other placements per layer (it cannot appear in a tuple)."""
        return self.layers is not None


def same(w: Wiring) -> dict:
    """The same wiring for every sublayer."""
    return dict.fromkeys(SUBLAYERS, w)
