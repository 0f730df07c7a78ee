"""The placement registry: one entry per placement with its wiring, norms, gate, final-norm and init rules."""

from __future__ import annotations

import math

from normjax import init, placements
from normjax.placement_entry import SUBLAYERS, Placement, same  # noqa: F401 (SUBLAYERS: part of this API)
from normjax.placements import Wiring
from normjax.registry_streams import ENTRIES as STREAM_ENTRIES


def _mixln_layers(cfg, depth):
    num_post = math.floor(cfg.mixln_fraction * depth)
    return ("post",) * num_post + ("pre",) * (depth - num_post)


def _hybrid_star_layers(cfg, depth):
    return ("hybrid_first",) + ("hybrid",) * (depth - 1)


_HYBRID_CODE = (
    "BryceZhuo/HybridNorm dense_model/olmo/model.py: per-head q/k/v norms of size d_model // n_heads (lines 449-466, "
    "applied per head at 668-673), FFN `og_x = N(x); x = og_x + FFN(og_x)` with ffn_residual_after_norm (870-891), "
    "final norm ln_f (1517); config dense_model/configs/exps/1.2B-dense-HybriedNorm.yaml"
)
_QKV = ("q", "k", "v")

_ENTRIES = (
    Placement(
        "post",
        "Post-LN",
        "#d62728",
        same(Wiring(placements.post)),
        final_norm=False,
        formula="x = N(x + F(x))",
        reference="Vaswani et al. 2017",
        notes="original Transformer",
    ),
    Placement(
        "pre",
        "Pre-LN",
        "#1f77b4",
        same(Wiring(placements.pre)),
        final_norm=True,
        formula="x = x + F(N(x))",
        reference="Xiong et al. 2020",
        notes="final norm before the head",
    ),
    Placement(
        "sandwich",
        "Sandwich-LN",
        "#9467bd",
        same(Wiring(placements.sandwich, norms=2)),
        final_norm=True,
        formula="x = x + N2(F(N1(x)))",
        reference="Ding et al. 2021",
        notes="Sandwich-LN; final norm; no embedding norm (that is `peri_ln`)",
    ),
    Placement(
        "peri_ln",
        "Peri-LN",
        "#c5b0d5",
        same(Wiring(placements.sandwich, norms=2)),
        final_norm=True,
        formula="x = x + N2(F(N1(x))), x_0 = N(embeddings)",
        reference="Kim et al. 2025",
        notes="`sandwich` plus a norm after the embeddings, and a final norm",
        embedding_norm=True,
    ),
    Placement(
        "branch_post",
        "branch-post",
        "#8c564b",
        same(Wiring(placements.branch_post)),
        final_norm=True,
        formula="x = x + N(F(x))",
        reference="Team OLMo 2024 (OLMo 2, arXiv 2501.00656); praxis",
        notes='OLMo 2\'s "reordered norm" (OLMo-core `reordered_norm`) and praxis\' "post"; not Post-LN; final norm',
        source="allenai/OLMo-core src/olmo_core/nn/transformer/block.py lines 293-309 (ReorderedNormTransformerBlock: "
        "`x + attention_norm(attention(x))`); config.py line 714 (olmo2_7B uses it)",
    ),
    Placement(
        "deepnorm",
        "DeepNorm",
        "#ff7f0e",
        same(Wiring(placements.deepnorm)),
        final_norm=False,
        formula="x = N(alpha x + F(x))",
        reference="Wang et al. 2022",
        notes="beta-scaled Xavier init of FFN, W^V, W^O; alpha, beta per topology",
        init=init.deepnorm_rule,
    ),
    Placement(
        "admin",
        "Admin",
        "#2ca02c",
        same(Wiring(placements.admin, omega=True)),
        final_norm=False,
        formula="x = N(omega x + F(x))",
        reference="Liu et al. 2020",
        notes="omega closed form sqrt((N+1)/ln(N+1) - 1) or profiled (`normjax.profile_admin`)",
        init=init.admin_rule,
    ),
    Placement(
        "rezero",
        "ReZero",
        "#17becf",
        same(Wiring(placements.gated_residual, norms=0, gate="scalar")),
        final_norm=False,
        formula="x = x + alpha F(x)",
        reference="Bachlechner et al. 2020",
        notes="alpha = 0, one per layer (or per sublayer); no norm",
        shared_gate=True,
    ),
    Placement(
        "skipinit",
        "SkipInit",
        "#7f7f7f",
        same(Wiring(placements.gated_residual, norms=0, gate="scalar")),
        final_norm=False,
        formula="x = x + alpha F(x)",
        reference="De & Smith 2020",
        notes="scalar alpha = 0 per sublayer; no norm",
    ),
    Placement(
        "layerscale",
        "LayerScale",
        "#bcbd22",
        same(Wiring(placements.layerscale, gate="channel")),
        final_norm=True,
        formula="x = x + lambda F(N(x))",
        reference="Touvron et al. 2021",
        notes="per-channel lambda, CaiT's init by depth",
        init=init.layerscale_rule,
    ),
    Placement(
        "tfixup",
        "T-Fixup",
        "#e377c2",
        same(Wiring(placements.plain_residual, norms=0)),
        final_norm=False,
        formula="x = x + F(x)",
        reference="Huang et al. 2020",
        notes="no norm; W^V, W^O, FFN times 0.67 N^(-1/4) (encoder layers) or (9M)^(-1/4) (decoder layers, "
        "decoder-only included); input embeddings times (9L)^(-1/4)",
        init=init.tfixup_rule,
        source="layer6ai-labs/T-Fixup fairseq/models/transformer.py lines 378-381, 604-607 (embeddings); "
        "fairseq/modules/transformer_layer.py lines 31-44, 157-170 (layers)",
    ),
    Placement(
        "mixln",
        "Mix-LN",
        "#393b79",
        {},
        final_norm=False,
        formula="post for the first quarter of layers, pre after",
        reference="Li et al. 2024",
        notes="per-layer placement",
        layers=_mixln_layers,
    ),
    Placement(
        "hybrid",
        "HybridNorm",
        "#637939",
        {
            "attn": Wiring(placements.plain_residual, norms=0, qkv_norm=_QKV),
            "cross": Wiring(placements.plain_residual, norms=0, qkv_norm=_QKV),
            "ffn": Wiring(placements.normed_residual),
        },
        final_norm=True,
        formula="attention x = x + F(x) with per-head QKV-norm inside; FFN u = N(x), x = u + F(u)",
        reference="Zhuo et al. 2025",
        notes="final norm",
        source=_HYBRID_CODE,
    ),
    Placement(
        "hybrid_first",
        "HybridNorm* first block",
        "#8ca252",
        {
            "attn": Wiring(placements.pre, qkv_norm=_QKV),
            "cross": Wiring(placements.pre, qkv_norm=_QKV),
            "ffn": Wiring(placements.pre),
        },
        final_norm=True,
        formula="x = x + F(N(x)) with per-head QKV-norm in attention",
        reference="Zhuo et al. 2025",
        notes="HybridNorm*'s first block (Pre-Norm + QKV-norm)",
        source="BryceZhuo/HybridNorm README.md (norm_pos_special_config \"_{0:{'attn_norm':True,'ffn_residual':"
        'False}}_"), applied in dense_model/olmo/model.py lines 474-486',
    ),
    Placement(
        "hybrid_star",
        "HybridNorm*",
        "#b5cf6b",
        {},
        final_norm=True,
        formula="`hybrid_first` for block 0, `hybrid` after",
        reference="Zhuo et al. 2025",
        notes="per-layer placement; final norm",
        layers=_hybrid_star_layers,
    ),
    Placement(
        "subln",
        "Sub-LN",
        "#ad494a",
        {
            "attn": Wiring(placements.pre, inner_norm=True),
            "cross": Wiring(placements.pre),
            "ffn": Wiring(placements.pre, inner_norm=True),
        },
        final_norm=True,
        formula="x = x + F(N(x)), F with a norm before W^O (self attention) and after the FFN activation",
        reference="Wang et al. 2022 (Magneto)",
        notes="W^V, W^O, FFN times sqrt(ln 2L) (sqrt(ln 3M), sqrt(ln(3M) ln(2N)/3) in encoder-decoders)",
        init=init.subln_rule,
        source="microsoft/torchscale torchscale/component/multihead_attention.py lines 49-53, 166-167; "
        "feedforward_network.py lines 123, 137-138; architecture/encoder.py lines 254-270, decoder.py 300-314",
    ),
    Placement(
        "normformer",
        "NormFormer",
        "#e7969c",
        {
            "attn": Wiring(placements.sandwich, norms=2, head_scale=True),
            "cross": Wiring(placements.pre),  # fairseq leaves encoder_attn without attn_ln / c_attn
            "ffn": Wiring(placements.pre, inner_norm=True),
        },
        final_norm=True,
        formula="attention x = x + N2(F(N1(x))) with per-head scales; FFN x = x + W2 N(act(W1 N1(x)))",
        reference="Shleifer et al. 2021",
        notes="head scales init 1; cross attention Pre-LN; final norm",
        source="facebookresearch/fairseq fairseq/modules/transformer_layer.py (commit 00b6434), "
        "TransformerDecoderLayerBase: attn_ln, c_attn, ffn_layernorm",
    ),
    Placement(
        "resi_dual",
        "ResiDual",
        "#5254a3",
        same(Wiring(placements.resi_dual)),
        final_norm=True,
        formula="x = N(x + F(x)), d = d + F(x); x_0 = d_0 = embeddings, output x_L + N(d_L)",
        reference="Xie et al. 2023",
        notes="two streams (`normjax.DualStream`); base init; the output norm is the final norm",
        source="microsoft/ResiDual resi_dual/resi_dual_layers.py lines 25-51 (encoder layer), 116-177 (decoder "
        "layer); resi_dual/resi_dual.py lines 107-131 (encoder: d_0 = x_0, output x + LN(d)), 252-283 (decoder)",
        dual_stream=True,
    ),
    Placement(
        "ngpt",
        "nGPT",
        "#843c39",
        same(Wiring(placements.ngpt, norms=0, gate="channel", hypersphere=True)),
        final_norm=False,
        formula="h = unit(x), x = unit(h + alpha (unit(F(x)) - h)); weights unit along d after every step",
        reference="Loshchilov et al. 2024",
        notes="no norm module, no biases; alpha per channel 0.05 (stored 1/sqrt(d)); per-head unit q, k times "
        "s_qk = 1, softmax scale sqrt(d_k); SwiGLU MLP with s_uv sqrt(d); logits times s_z = 1; decoder and "
        "encoder only",
        init=init.ngpt_rule,
        source="NVIDIA/ngpt (commit ed19eb2) model.py lines 86-100 (alpha, s_qk, s_uv), 128-135 (q/k, softmax "
        "scale), 144-153 and 168-177 (updates), 158-164 (MLP), 239-241 and 284-285 (s_z); train.py lines 128 "
        "(base_scale), 394-411 (normalize_matrices)",
        post_update=init.hypersphere_normalize,
    ),
)
_ENTRIES += (
    Placement(
        "lns",
        "LayerNorm Scaling",
        "#3182bd",
        same(Wiring(placements.lns, depth_scaled=True)),
        final_norm=True,
        formula="x = x + F(N(x) / sqrt(l)), l = 1..L the block's position",
        reference="Sun et al. 2025 (arXiv 2502.05795)",
        notes="Pre-LN with every block norm's output times 1/sqrt(l): 1 in the first block, 1/sqrt(L) in the last; "
        "final norm unscaled",
        source="allenai/OLMo-core src/olmo_core/nn/transformer/block.py lines 232-290 "
        "(LayerNormScaledTransformerBlock, `ln_scale_value = 1.0 / math.sqrt(block_idx + 1)` line 273), "
        "block type `default_scaled` (config.py line 110)",
    ),
    Placement(
        "keel",
        "KEEL (pre+post)",
        "#fdae6b",
        same(Wiring(placements.keel, norms=2)),
        final_norm=False,
        formula="x = N2(x + F(N1(x)))",
        reference="KEEL; x-transformers `pre_and_post_norm`",
        notes="Post-LN with a norm on the branch input too; no final norm",
        source="lucidrains/x-transformers (commit 9252ed7) x_transformers/x_transformers.py lines 2820-2826 "
        "(pre_and_post_norm: pre_norm on, no final norm), 3137 (post_main_norm), 3495-3547 (forward)",
    ),
    Placement(
        "b2t",
        "B2T",
        "#a55194",
        {
            "attn": Wiring(placements.post),
            "cross": Wiring(placements.post),
            "ffn": Wiring(placements.b2t, block_skip=True),
        },
        final_norm=False,
        formula="Post-LN, the last sublayer x = N(x + F(x) + x_in), x_in the block's input",
        reference="Takase et al. 2022 (arXiv 2206.00330)",
        notes="every block weight times L^(-1/2); no final norm",
        init=init.b2t_rule,
        source="takase/b2t_connection (commit c8e2ad4) fairseq/modules/transformer_layer.py lines 103-145 (encoder "
        "layer: `residual_bottom`), 277-375 (decoder layer, cross attention included), 401-405 (rescaling_init)",
        # not jacobian_spectrum: its per-sublayer maps (sublayer_fn) take one stream, B2T's FFN also reads x_in
    ),
)
_ENTRIES += STREAM_ENTRIES
REGISTRY: dict[str, Placement] = {p.name: p for p in _ENTRIES}
PLACEMENTS = tuple(REGISTRY)
# Placements that name one wiring per layer (recipes such as mixln resolve to these per layer).
LAYER_PLACEMENTS = tuple(p.name for p in _ENTRIES if not p.is_recipe)


def get(name: str) -> Placement:
    """The registry entry of `name`; ValueError naming the valid choices for anything else."""
    if name not in REGISTRY:
        raise ValueError(f"unknown placement {name!r}: valid choices are {', '.join(map(repr, PLACEMENTS))}")
    return REGISTRY[name]


def markdown_table() -> str:
    """The README's placements table, one row per registry entry."""
    rows = ["| `placement` | wiring per sublayer | init and notes | reference |", "|---|---|---|---|"]
    rows += [f"| `{p.name}` | {p.formula} | {p.notes} | {p.reference} |" for p in _ENTRIES]
    return "\n".join(rows)
