"""The claims the project checks (the registry behind docs/claims.md) and the verdict row a rule returns."""

from __future__ import annotations

import dataclasses

INCONCLUSIVE = "inconclusive at this scale"  # measured, but the intervals straddle the thresholds
NOT_TESTABLE = "not testable at this scale"  # not measured here: data, seeds or a run are missing
EMPIRICAL = ("holds", "partly holds", "does not hold", INCONCLUSIVE, NOT_TESTABLE)
CONSTRUCTION = "verified by construction"  # a check of how the code is written, counted apart from findings
VERDICTS = EMPIRICAL + (CONSTRUCTION,)
# A claim measured outside its own setting whose checks are contradicted: the data do not refute the paper there.
NOT_REPRODUCED = "not reproduced at this scale"

# Where a claim is tested, relative to the setting it is made in (SCIENCE.md, "Scope and mechanism"). "does not
# hold" is kept for a contradiction in the claim's own setting; outside it the claim reads NOT_REPRODUCED.
SCOPES = {
    "paper, in its setting": "the paper's statement, measured in the setting it is made in",
    "paper, outside its setting": "the paper's statement, measured outside its setting (`outside` says how)",
    "folk claim": "a claim of the seed notes (interview folklore), measured in the setting it states",
    "library default": "a library's default choice, not a statement of the paper",
    "construction": "a check of how this code is written",
}
OUTSIDE = "paper, outside its setting"

XIONG = "Xiong et al. 2020, On Layer Normalization in the Transformer Architecture (arXiv 2002.04745)"
LIU = "Liu et al. 2020, Understanding the Difficulty of Training Transformers (arXiv 2004.08249)"
DEEPNET = "Wang et al. 2022, DeepNet: Scaling Transformers to 1,000 Layers (arXiv 2203.00555)"
WORTSMAN = (
    "Wortsman et al. 2023, Small-scale proxies for large-scale Transformer training instabilities (arXiv 2309.14322)"
)
FOLKLORE = "common explanations of Post-LN vs Pre-LN (the notes this project began from)"


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim the project checks: where it comes from and what it says (each study lists the claims it
    measures: `normjax.studies.STUDIES`)."""

    id: str
    title: str  # one line, shown in the report's tables
    source: str
    statement: str  # the claim in this project's words, with the prediction a study can test
    machine_dependent: str = ""  # why its verdict can differ between machines (timings), shown beside it
    scope: str = "folk claim"  # one of SCOPES
    outside: str = ""  # for OUTSIDE: the axes on which the measurement leaves the paper's setting

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise ValueError(f"claim {self.id}: scope {self.scope!r} is not one of {', '.join(SCOPES)}")
        if (self.scope == OUTSIDE) != bool(self.outside):
            raise ValueError(f"claim {self.id}: `outside` names the axes exactly when the scope is {OUTSIDE!r}")

    def scoped(self, verdict: str) -> str:
        """The claim's verdict as the report states it: a contradiction outside its setting is NOT_REPRODUCED."""
        return NOT_REPRODUCED if verdict == "does not hold" and self.scope == OUTSIDE else verdict

    @property
    def scope_text(self) -> str:
        return f"{self.scope} ({self.outside})" if self.outside else self.scope


_CLAIMS = (
    Claim("S1", "Post-LN at init: LN input grows with depth, dLN/dz shrinks, gradients vanish toward shallow layers",
          FOLKLORE, "In Post-LN the input z = x + F(x) of every LayerNorm grows with depth, so ||dLN/dz|| = 1/sigma "
          "shrinks and gradients decay exponentially toward the first layers (measured here at init; in training "
          "see D3)."),
    Claim("S2", "At init, LN divides by sigma_l ~ sqrt(l): gradient ~ 1/depth near the output, explodes near the input",
          FOLKLORE + ", attributed to Xiong et al", "Because LN divides by sigma_l ~ sqrt(l), the last layer's "
          "gradient scales like 1/L while the first layer's grows with L (premise and gradients measured at init)."),
    Claim("S3", "Pre-LN identity path: dx_L/dx_l = I + sum dF/dx, gradients reach layer 1 undamped", FOLKLORE,
          "The Pre-LN residual path makes dx_L/dx_l = I + sum_k dF_k/dx_l, so no gradient direction is damped on its "
          "way to the first layer."),
    Claim("S4", "Pre-LN residual stream grows without bound with depth; a final norm is needed", FOLKLORE,
          "Pre-LN's residual stream grows with depth (at init and in training), so the head needs a final norm."),
    Claim("S5", "Post-LN needs warmup; Pre-LN tolerates larger lr and short or no warmup", FOLKLORE,
          "Without warmup Post-LN fails (diverges or stalls at the unigram level) at learning rates Pre-LN trains "
          "at; Pre-LN tolerates larger learning rates and short or no warmup. Why warmup rescues Post-LN is tested "
          "by intervention in A1-A4 (Adam's early preconditioner: A1, A3, A4; the top of the stack: A2)."),
    Claim("S6", "Pre-LN and Post-LN cost the same time and memory per step", FOLKLORE,
          "A Pre-LN and a Post-LN step of the same model cost the same time and memory.",
          machine_dependent="CPU time on a shared machine: it can differ on another machine or under other load"),
    Claim("S7", "ReZero is the identity at init; DeepNorm lets Post-LN scale to very deep stacks", FOLKLORE,
          "ReZero's network is the identity at init; DeepNorm trains at depths where Post-LN fails with the same "
          "lr and warmup."),
    Claim("X1", "Post-LN x = LN(x + F(x)); Pre-LN x = x + F(LN(x)) plus a final LN", XIONG,
          "The two architectures as the paper defines them (a check of this code's wiring)."),
    Claim("X2", "Theory setting: one head, W^Q = W^K = 0, N(0, 1/d) weights, gamma 1, beta 0", XIONG,
          "The analysis setting: one head with W^Q = W^K = 0 (uniform attention), N(0, 1/d) weights, zero biases, "
          "gamma 1, beta 0 (a check of this code's switch)."),
    Claim("X3", "Lemma 2: Post-LN E||LN input||^2 = 3d/2; Pre-LN (1 + l/2)d <= E||x_l||^2 <= (1 + 3l/2)d", XIONG,
          "In the theory setting the Post-LN FFN LayerNorm input has E||z||^2 = 3d/2 in every layer, and Pre-LN's "
          "stream satisfies (1 + l/2)d <= E||x_l||^2 <= (1 + 3l/2)d."),
    Claim("X4", "Lemma 3: ||J_LN(x)||_2 = O(sqrt(d)/||x||); ours: J's closed form, ||J||_2 <= max|gamma|/sigma", XIONG,
          "Lemma 3 bounds the LayerNorm Jacobian's spectral norm by O(sqrt(d)/||x||) (a rate). The exact form is "
          "ours: J = (1/sigma) diag(gamma)(I - 11^T/d - zhat zhat^T/d), so ||J||_2 <= max|gamma|/sigma, with "
          "equality at gamma = 1 (then 1/sigma = sqrt(d)/||x - mean(x)|| at eps = 0: Lemma 3's rate with constant 1)."),
    Claim("X5", "Theorem 1: last FFN gradient O(d sqrt(ln d)) for Post-LN, O(d sqrt(ln d / L)) for Pre-LN", XIONG,
          "At init the last layer's FFN weight gradient is bounded above by O(d sqrt(ln d)) for Post-LN (no growth "
          "with depth L) and O(d sqrt(ln d / L)) for Pre-LN (decay at least like L^(-1/2)): upper bounds, read as "
          "bounds on the log-log slope vs L (at most 0 and at most -1/2)."),
    Claim("X6", "Fig. 3: Post-LN FFN gradient grows with layer index, Pre-LN about flat (||E[grad]||)", XIONG,
          "At init in a 6-6 Transformer the FFN weight gradient ||E[grad]|| of W^2 grows with the layer index for "
          "Post-LN and is about flat for Pre-LN, in the decoder (the stack next to the output; the encoder is "
          "reported, not judged, see L3)."),
    Claim("X7", "Fig. 2: Post-LN without warmup fails on IWSLT14; Pre-LN without warmup trains sooner", XIONG,
          "On IWSLT14 De-En, Post-LN without warmup reaches BLEU 8.45 against about 34 with warmup; Pre-LN without "
          "warmup reaches the same quality sooner."),
    Claim("X8", "IWSLT settings: 6-6, d 512, FFN 1024, 4 heads, label smoothing 0.1, dropout 0.1", XIONG,
          "The IWSLT model and optimizer settings of the paper's experiments."),
    Claim("L1", "Output change under a random perturbation grows O(N) for Post-LN, O(log N) for Pre-LN and Admin",
          LIU, "Under their tool's default perturbation (a small random sign on every non-bias, non-LN weight, "
          "embeddings included), Var of the output change grows linearly with the number of residual sublayers N "
          "for Post-LN and logarithmically for Pre-LN and Admin (Theorem 2 sums uncorrelated per-sublayer "
          "changes); judged by model selection between a + b N and a + b ln N and by Post-LN's larger exponent."),
    Claim("L2", "Admin's profiled omega grows with N like admin-torch's default sqrt((N+1)/ln(N+1) - 1)", LIU,
          "Admin sets omega by one profiling pass (the paper); admin-torch's default replaces profiling by the "
          "closed form sqrt((N+1)/ln(N+1) - 1) (the library's choice, not a statement of the paper). The profiled "
          "last-sublayer omega should scale with N like that closed form (its log-log slope over the same N)."),
    Claim("L3", "At init, Post-LN's gradient vanishing shows in the decoder, not the encoder", LIU,
          "At init, Post-LN's gradient vanishing toward the shallow layers is in the decoder, not the encoder (Sec. "
          "3, Fig. 3; the decoder half is X6's Post-LN check)."),
    Claim("D1", "DeepNorm alpha/beta per topology; beta scales FFN, W^V, W^O, not W^Q, W^K", DEEPNET,
          "DeepNorm's alpha and beta per topology, with beta scaling the init of FFN, W^V and W^O only (a check of "
          "this code's constants)."),
    Claim("D2", "Early update ||F(x, theta_t) - F(x, theta_0)|| grows with depth for Post-LN, flat for DeepNorm",
          DEEPNET, "Early in training the model update ||F(x, theta_t) - F(x, theta_0)|| grows with depth for "
          "Post-LN and stays small and nearly flat for DeepNorm."),
    Claim("D3", "Post-LN without warmup: exploding update, LN inputs grow >> sqrt(d), gradients vanish", DEEPNET,
          "Post-LN fails without warmup by a chain: an exploding first update, then LN inputs >> sqrt(d), then "
          "gradients vanishing through the LNs. Measured here: each link's size and the links' order in time at the "
          "probed steps, not that one causes the next (no intervention sets the LN inputs). A2 (warmup of the top "
          "or the bottom half only) and A1/A4 (the first updates' size set by Adam's preconditioner) test where and "
          "through what the chain starts."),
    Claim("R1", "ReZero: input-output Jacobian exactly I at init; only alpha gets a gradient at step 0",
          "Bachlechner et al. 2020, ReZero is All You Need (arXiv 2003.04887)", "With alpha = 0 the input-output "
          "Jacobian is exactly I and only alpha gets a gradient at step 0 (a check of this code)."),
    Claim("R2", "Jacobian log-singular-value spread widens with depth for Post-LN; ReZero all ones",
          "Bachlechner et al. 2020 (arXiv 2003.04887)", "The spread of log singular values of dx_L/dx_0 widens with "
          "depth for Post-LN; ReZero's are all 1."),
    Claim("R3", "T-Fixup: no LN, no warmup; 0.67 N^(-1/4) encoder, (9M)^(-1/4) decoder scaling",
          "Huang et al. 2020, Improving Transformer Optimization Through Better Initialization (ICML)",
          "T-Fixup trains without LayerNorm and without warmup about as well as Pre-LN."),
    Claim("R4", "Peri-LN/Sandwich: hidden variance grows about linearly; Pre-LN can grow faster in training",
          "Kim et al. 2025, Peri-LN (arXiv 2502.02732)", "With Peri-LN (Sandwich) the hidden-state variance grows "
          "about linearly with depth; Pre-LN's can grow faster during training."),
    Claim("R5", "Mix-LN (post first quarter, pre after) gives a flatter per-layer gradient profile",
          "Li et al. 2024, Mix-LN (arXiv 2412.13795)", "In a decoder-only LM, Post-LN in the first quarter of layers "
          "and Pre-LN after gives a flatter per-layer gradient profile than Pre-LN (and Post-LN); the paper measures "
          "it during pre-training, this project at init (grad_norms_at_init) and during a short training of a "
          "24-layer byte LM (trained_layers)."),
    Claim("R6", "DyT gamma tanh(alpha x) + beta, alpha_0 = 0.5, can replace the norm in Pre-LN",
          "Zhu et al. 2025, Transformers without Normalization (arXiv 2503.10622)", "DyT, gamma tanh(alpha x) + beta "
          "with alpha_0 = 0.5, replaces LayerNorm in Pre-LN at about the same loss."),
    Claim("R7", "Noam peak 6.988e-4 at step 4000 for d = 512; fairseq inverse_sqrt ramps from warmup_init_lr",
          "Vaswani et al. 2017 (arXiv 1706.03762); fairseq's inverse_sqrt scheduler", "The Noam schedule peaks at "
          "6.988e-4 at step 4000 for d = 512; fairseq's inverse_sqrt starts at warmup_init_lr (a check of this "
          "code's schedules)."),
    Claim("W1", "Large-model instabilities (attention-logit growth, logit drift) show in small models at high lr",
          WORTSMAN, "The instabilities of large Transformers, attention-logit growth and output-logit divergence, "
          "appear in small models trained at high learning rates: the attention logits grow and the output logits "
          "drift from 0 as the lr grows (final loss and diagnostics against lr over orders of magnitude)."),
    Claim("W2", "LR sensitivity grows with size; warmup, qk-layernorm and z-loss reduce it", WORTSMAN,
          "LR sensitivity (the expected gap to the best loss over an lr range, a failed run at the init loss) grows "
          "with model size without mitigations; warmup, qk-layernorm and z-loss each reduce it."),
    Claim("W3", "Attention-logit growth precedes the divergence that qk-layernorm prevents", WORTSMAN,
          "At high lr the attention logits grow before the loss diverges, and qk-layernorm, which bounds them, "
          "prevents the divergence."),
    Claim("N1", "LayerNorm Scaling: Pre-LN's deep blocks approach the identity; 1/sqrt(l) keeps them away from it",
          "Sun et al. 2025, The Curse of Depth in Large Language Models (arXiv 2502.05795)", "Pre-LN's stream "
          "variance grows with depth, so the Jacobian of a deep block approaches the identity and the block "
          "contributes little; scaling each norm's output by 1/sqrt(l) (LNS) keeps the deep blocks farther from "
          "the identity. The paper argues from trained models; measured here at init (||J_l - I||_2 per block, "
          "jacobian_spectrum) and after training (angular distance and ||J_l - I||_2, trained_layers)."),
    Claim("N2", "mHC: doubly stochastic H_res keeps the composite residual mapping's spectral norm <= 1",
          "Xie et al. 2025, mHC: Manifold-Constrained Hyper-Connections (DeepSeek, arXiv 2512.24880)",
          "Unconstrained hyper-connections' composite residual mapping prod_l H_res^l can grow over depth; "
          "projecting every H_res onto the doubly stochastic matrices (Sinkhorn-Knopp) keeps its spectral norm "
          "<= 1 (checked on the model's own H_res at init and after perturbing them)."),
    Claim("A1", "GI-Adam (second moment initialized from the first gradient) trains Post-LN without warmup",
          "Kalra & Barkeshli 2024, Why Warmup the Learning Rate? Underlying Mechanisms and Improvements (arXiv "
          "2406.09405)", "If warmup's job is to tame Adam's early preconditioner (its second moment starting at 0, "
          "a large preconditioned sharpness), initializing that moment from the first gradient's square (GI-Adam) "
          "without any warmup trains where Adam without warmup fails (answer study: Post-LN at the failing cell)."),
    Claim("A2", "Warmup of the top half of the stack alone rescues Post-LN; of the bottom half alone it does not",
          XIONG + ", where the large early gradients sit near the output", "Xiong et al. locate Post-LN's large "
          "expected gradients at init near the output layer; if that is what warmup protects, a warmup applied to "
          "the top half of the stack only (the bottom half at the peak lr from step 0) trains where no warmup "
          "fails, and a warmup of the bottom half only does not."),
    Claim("A3", "Warmup keeps Post-LN's Adam-preconditioned sharpness further below the adaptive edge of stability",
          "Kalra & Barkeshli 2024 (arXiv 2406.09405); Cohen et al. 2022, Adaptive Gradient Methods at the Edge of "
          "Stability (arXiv 2207.14484)", "Warmup carries the network into better-conditioned regions: during the "
          "warmup window the top eigenvalue of P^-1 H (P = sqrt(nu_hat) + eps) reaches a smaller fraction of the "
          "threshold (2 + 2 b1) / ((1 - b1) lr_t) with warmup than without, and Post-LN's fraction without warmup "
          "exceeds Pre-LN's (Lanczos on Hessian-vector products, tracked during training)."),
    Claim("A4", "RAdam trains Post-LN without warmup",
          "Liu L. et al. 2020, On the Variance of the Adaptive Learning Rate and Beyond (RAdam, arXiv 1908.03265)",
          "RAdam's rectification withholds the adaptive step until the second moment's variance is tractable, a "
          "built-in warmup: it trains Post-LN where Adam without warmup fails."),
    Claim("A5", "Post-LN, where it trains, reaches a lower final loss than Pre-LN", LIU + "; the field's 'Post-LN "
          "is better when it trains'", "Each at its own best lr (chosen on the first seed from the lr window), "
          "Post-LN's final validation nll is below Pre-LN's at every depth measured (paired by seed, both "
          "trained)."),
)  # fmt: skip
CONSTRUCTION_SCOPE = {"scope": "construction"}
SCOPE = {  # where each claim is tested, relative to the setting it is made in (shown in the report's summary)
    "X1": CONSTRUCTION_SCOPE, "X2": CONSTRUCTION_SCOPE, "D1": CONSTRUCTION_SCOPE, "R1": CONSTRUCTION_SCOPE,
    "R7": CONSTRUCTION_SCOPE,
    "X3": {"scope": "paper, in its setting"},  # Lemma 2's own setting: init, one head, W^Q = W^K = 0
    "X4": {"scope": "paper, in its setting"},  # a property of LayerNorm at any input
    "X5": {"scope": "paper, in its setting"},  # Theorem 1 is a bound at init, measured at init
    "X8": {"scope": "paper, in its setting"},  # the paper's settings themselves (run only at :paper)
    "R2": {"scope": "paper, in its setting"},  # the Jacobian at init, as Bachlechner et al. measure it
    "N2": {"scope": "paper, in its setting"},  # a property of the doubly stochastic projection, any weights
    "X6": {"scope": OUTSIDE, "outside": "width d 128 (paper 512), the gettext catalogs' De-En strings (a copy "
           "task where that arm is off) instead of IWSLT14, fewer batches (paper 100)"},
    "X7": {"scope": OUTSIDE, "outside": "depth 2-2 (paper 6-6), width d 128 (512), gettext De-En (IWSLT14), 600 "
           "steps (50 epochs)"},
    "L1": {"scope": OUTSIDE, "outside": "width d 32 (paper 512), byte-LM batches instead of WMT14 En-De"},
    "L3": {"scope": OUTSIDE, "outside": "6-6 layers at width d 128 (paper: 18 layers, d 512), the gettext "
           "catalogs' De-En strings (a copy task where that arm is off) instead of WMT14 En-De"},
    "L2": {"scope": "library default"},  # admin-torch's closed form, not a statement of Liu et al.
    "D2": {"scope": OUTSIDE, "outside": "decoder-only byte LMs, d 32 and 128, the first 10 updates at lr 1e-4 "
           "(paper: 64-128-2 encoder-decoders on IWSLT14)"},
    "D3": {"scope": OUTSIDE, "outside": "decoder-only byte LM, d 32, 100 steps (paper: encoder-decoders on "
           "IWSLT14 / WMT)"},
    "R3": {"scope": OUTSIDE, "outside": "small byte LMs (paper: 6-6 NMT models on IWSLT14 / WMT14)"},
    "R4": {"scope": OUTSIDE, "outside": "byte LMs at d 32-64 and init-time streams (paper: 400M-3.2B LLMs "
           "pre-trained on 30B tokens)"},
    "R5": {"scope": OUTSIDE, "outside": "at init on the synthetic copy task and 24-layer byte LMs, d 64, 600 steps "
           "(paper: LLaMA 71M-1B in pre-training)"},
    "R6": {"scope": OUTSIDE, "outside": "small byte LMs (paper: ViT, DiT, LLaMA 7B-70B)"},
    "N1": {"scope": OUTSIDE, "outside": "at init and in 24-layer byte LMs, d 64, 600 steps (paper: trained LLMs, "
           "130M-7B)"},
    "W1": {"scope": OUTSIDE, "outside": "d 128, 600 steps, a byte LM (paper: 9.4M-1.2B parameters, 10k+ steps, "
           "C4)"},
    "W2": {"scope": OUTSIDE, "outside": "d 128, 600 steps, a byte LM, depth 6-12 as the size axis (paper: "
           "9.4M-1.2B parameters, C4)"},
    "W3": {"scope": OUTSIDE, "outside": "d 128, 600 steps, a byte LM (paper: 9.4M-1.2B parameters, C4)"},
    **{c: {"scope": OUTSIDE, "outside": "decoder-only byte LMs, d 64-128, 120-600 steps (papers: CIFAR / "
           "WikiText models, NMT 6-6 on IWSLT14 / WMT14)"} for c in ("A1", "A2", "A3", "A4", "A5")},
}  # fmt: skip
REGISTRY = tuple(dataclasses.replace(c, **SCOPE.get(c.id, {})) for c in _CLAIMS)  # unlisted: folk claims (S*)
CLAIMS = {c.id: c.title for c in REGISTRY}  # id -> title, in report order
BY_ID = {c.id: c for c in REGISTRY}


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One row of the report: what a claim predicts, what was measured, and the verdict a rule gave."""

    claim: str
    prediction: str
    measured: str  # the numbers, in words: "slope -0.49 +- 0.03 (3 seeds)"
    verdict: str  # one of VERDICTS
    reason: str  # which rule gave the verdict, or why it is not testable here
    figure: str | None = None  # path relative to the study folder
    numbers: dict = dataclasses.field(default_factory=dict)
    key: str = ""  # the one number (with its interval) that decides, for the report's summary table
    checks: list = dataclasses.field(default_factory=list)  # the rule's three-valued checks, when it has several

    def __post_init__(self):
        if self.claim not in CLAIMS:
            raise ValueError(f"unknown claim {self.claim!r}: valid ids are {', '.join(CLAIMS)}")
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")
        bad = [c for c in self.checks if c not in ("supported", "contradicted", "inconclusive")]
        if bad:
            raise ValueError(f"checks {bad} are not supported / contradicted / inconclusive")


def verdict_row(
    claim: str,
    prediction: str,
    measured: str,
    verdict: str,
    reason: str,
    figure: str | None = None,
    key: str = "",
    checks=(),
    **numbers,
) -> dict:
    """A validated Verdict as a JSON-ready dict: one row a study's rules return. `checks` (a rule's Check values)
    are what the report combines across a claim's rows (normjax.report.rules.claim_verdict), so a row whose
    verdict comes from `combine(checks)` should pass them."""
    checks = [
        {True: "supported", False: "contradicted"}.get(c, str(c)) if isinstance(c, bool) else str(c) for c in checks
    ]
    return dataclasses.asdict(Verdict(claim, prediction, measured, verdict, reason, figure, numbers, key, checks))
