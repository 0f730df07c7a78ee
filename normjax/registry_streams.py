"""Registry entries of the multi-stream and stream-scaling schemes: HC, mHC, mHC-lite, GPAS, SiameseNorm."""

from __future__ import annotations

from normjax import hyper, init, placements, siamese
from normjax.placement_entry import Placement, same
from normjax.placements import Wiring

_HC_CODE = (
    "lucidrains/hyper-connections (commit 4775103) hyper_connections/hyper_connections.py lines 229-247 (static "
    "alpha = [e_{k mod n} | I], beta = 1, dynamic fns 0, scales 1e-2), 286-318 (width connection), 339-372 (depth "
    "connection), 59-61 (streams repeated, summed at the end)"
)
ENTRIES: tuple[Placement, ...] = (
    Placement(
        "shc",
        "HC (static)",
        "#6b6ecf",
        same(Wiring(hyper.hyper, hyper="shc")),
        final_norm=True,
        formula="n streams X: X = H_res X + H_post^T F(N(H_pre X)), H learned per sublayer; output N(sum X)",
        reference="Zhu et al. 2024 (arXiv 2409.19606)",
        notes="static hyper-connections, n = `hyper_streams` (4); init H_pre = e_{k mod n}, H_res = I, H_post = 1 "
        "(n = 1: Pre-LN); X_0 = n copies of x_0",
        source=_HC_CODE,
        hyper_streams=True,
    ),
    Placement(
        "dhc",
        "HC (dynamic)",
        "#9c9ede",
        same(Wiring(hyper.hyper, hyper="dhc")),
        final_norm=True,
        formula="`shc` with H + s tanh(N(X) W) per token",
        reference="Zhu et al. 2024 (arXiv 2409.19606)",
        notes="dynamic hyper-connections: W = 0, s_alpha = s_beta = 0.01 at init (equals `shc` at init)",
        source=_HC_CODE,
        hyper_streams=True,
    ),
    Placement(
        "mhc",
        "mHC",
        "#e6550d",
        same(Wiring(hyper.hyper, hyper="mhc")),
        final_norm=True,
        formula="X = H_res X + H_post^T F(N(H_pre X)), H_res = Sinkhorn(.) doubly stochastic, H_pre = sigmoid(.), "
        "H_post = 2 sigmoid(.)",
        reference="Xie et al. 2025 (DeepSeek, arXiv 2512.24880)",
        notes="manifold-constrained HC: H from vec(X) / rms, alpha = 0.01, phi = 0 at init; `sinkhorn_iters` (20), "
        "`sinkhorn_order` (columns then rows, eq. 9)",
        source="lucidrains/hyper-connections (commit 4775103) hyper_connections/manifold_constrained_hyper_connections"
        ".py lines 46-61 (Sinkhorn), 270-290 (init), 377-408 (sigmoid, Sinkhorn, 2 sigmoid); DeepSeek-V4 inference "
        "model.py Block.hc_pre / hc_post (vec(X) / rms over n D, the branch's own norm after hc_pre)",
        hyper_streams=True,
    ),
    Placement(
        "mhc_lite",
        "mHC-lite",
        "#fd8d3c",
        same(Wiring(hyper.hyper, hyper="mhc_lite")),
        final_norm=True,
        formula="X = H_res X + H_post^T F(N(H_pre X)), H_res = sum_r softmax(.)_r P_r over the n! permutation "
        "matrices, H_pre = sigmoid(.), H_post = 2 sigmoid(.)",
        reference="Yang et al. 2026 (mHC-lite, arXiv 2601.05732)",
        notes="`mhc` with H_res exactly doubly stochastic (no Sinkhorn); authors' init: static logits of H_pre, "
        "H_post +1 on stream k mod n, -1 elsewhere, of H_res 0 on the identity, -8 on the others; gain on "
        "vec(X) / rms, alpha = 0.01, phi = 0",
        source="FFTYYY/mhc-lite (commit ea19775) hyper_conn/mhc_lite.py lines 50-63 (permutation matrices), "
        "109-117 (RMSNorm with gain over n D), 246-302 (init), 345-389 (softmax over permutations, sigmoid, "
        "2 sigmoid), 428 (depth connection)",
        hyper_streams=True,
    ),
)
_GPAS_CODE = (
    "dandingsky/GPAS (commit 3198068) peft_pretraining/modeling_llama.py lines 261-268 (GPASBlock: x - "
    "SiLU(gate) x.detach(), gate 0.0), 336-356 (one GPASBlock per decoder layer, both sublayers), "
)
_GPAS_NOTES = "alpha = 0 at init (the model is then `{}`'s), one per block, shared by its sublayers; "
ENTRIES += (
    Placement(
        "pre_gpas",
        "Pre-LN + GPAS",
        "#31a354",
        same(Wiring(placements.pre_gpas, gate="scalar")),
        final_norm=True,
        formula="x = GPAS(x + F(N(x))), GPAS(x) = x - SiLU(alpha) sg(x)",
        reference="Chen et al. 2025 (GPAS, arXiv 2506.22049)",
        notes=_GPAS_NOTES.format("pre") + "sg the stop-gradient: forward (1 - SiLU(alpha)) x, gradient in x "
        "unscaled; final norm",
        shared_gate=True,
        source=_GPAS_CODE + "491-510 (pre_gpas forward)",
    ),
    Placement(
        "sandwich_gpas",
        "Sandwich-LN + GPAS",
        "#de9ed6",
        same(Wiring(placements.sandwich_gpas, norms=2, gate="scalar")),
        final_norm=True,
        formula="x = GPAS(x + N2(F(N1(x))))",
        reference="Chen et al. 2025 (GPAS, arXiv 2506.22049)",
        notes=_GPAS_NOTES.format("sandwich") + "final norm",
        shared_gate=True,
        source=_GPAS_CODE + "512-533 (sandwich_gpas forward)",
    ),
    Placement(
        "deepnorm_gpas",
        "DeepNorm + GPAS",
        "#7b4173",
        same(Wiring(placements.deepnorm_gpas, gate="scalar")),
        final_norm=False,
        formula="x = N(alpha_DN GPAS(x) + F(x)), F reads the unscaled x",
        reference="Chen et al. 2025 (GPAS, arXiv 2506.22049)",
        notes=_GPAS_NOTES.format("deepnorm") + "DeepNorm's alpha_DN, beta init",
        init=init.deepnorm_rule,
        shared_gate=True,
        source=_GPAS_CODE + "535-553 (deeppost_gpas forward: the skip scaled, the branch input not)",
    ),
)
ENTRIES += (
    Placement(
        "siamese",
        "SiameseNorm",
        "#8c6d31",
        same(Wiring(siamese.siamese, norms=3, depth_scaled=True)),
        final_norm=True,
        formula="x' = N_x(x), u = N(x' + N_d(d)), x = x' + F(u) / (sqrt(2) sqrt(l)), d = d + F(u); x_0 = d_0 = "
        "embeddings, output N_f(N_a(x_L) + N_b(d_L))",
        reference="Li et al. 2026 (SiameseNorm, arXiv 2602.08064)",
        notes="two streams (`normjax.DualStream`: x Post-LN-like, d Pre-LN-like) sharing each branch; l = 1..L the "
        "block's position; base init; N_f is the final norm",
        source="Qwen-Applications/SiameseNorm (commit 70efa00) deit-model-siamesenorm.py lines 204-226 (block: "
        "post_norm, pre_norm, input_norm, c = sqrt(2 (index + 1))), 285-287 and 352-356 (y = x, output "
        "final_norm(pre_norm(x) + post_norm(y))); dit-model-siamesenorm.py lines 123-134, 264-267",
        dual_stream=True,
        stream_norms=True,
    ),
)
