"""CompleteP's optimizer rules: per-group Adam lr, eps and weight-decay multipliers by depth and width."""

import dataclasses
import math

import jax
import optax

PARAMETRIZATIONS = ("standard", "completep")
# hidden_weight: the blocks' kernels; hidden_other: every other block parameter (norm gains and biases, linear
# biases, block gains and scalars); embedding: token and position tables, an untied head; outside: embedding and
# final norms
GROUPS = ("embedding", "hidden_weight", "hidden_other", "outside")


@dataclasses.dataclass(frozen=True)
class CompleteP:
    """The optimizer half of CompleteP (Dey et al. 2025, arXiv 2505.01618, Table 1), relative to a base model.

    With m_N = N / N_base (width), m_L = L / L_base (the depth of the parameter's stack) and alpha (1 for
    CompleteP, 1/2 for depth-muP), the base lr eta, AdamW eps and weight decay lambda become, per group:

    | group | lr | weight decay | eps |
    |---|---|---|---|
    | embedding | eta | lambda | eps m_N^-1 m_L^-alpha |
    | hidden_weight | eta m_N^-1 m_L^(alpha-1) | lambda m_N | eps m_N^-1 m_L^-alpha |
    | hidden_other | eta m_L^(alpha-1) | 0 | eps m_N^-1 m_L^-alpha |
    | outside | eta | 0 | eps m_N^-1 m_L^-alpha |

    Weight decay is applied as torch's AdamW does, p -= lr_group * wd_group * p, so the hidden weights' decay per
    step is eta lambda m_L^(alpha-1), free of width. Checked against the authors' code, EleutherAI/nanoGPT-mup
    branch `completep` (commit 6f8bc3b), `model.py` lines 313-362 (`configure_optimizers`: the groups, lines
    331-332 the multipliers, line 335 the eps, lines 336-362 the lr_scale / weight_decay per group) and `train.py`
    lines 298-299 (lr = schedule lr * lr_scale). The forward half, x + m_L^-alpha F(x) (`model.py` lines 113-118),
    is `ModelConfig.branch_multiplier_alpha` / `branch_multiplier_base_depth`.

    How ours differs: groups come from the NNX parameter path, not from GPT-2 names, so every block parameter
    that is not a kernel (the reference's LayerNorm and linear biases, and here also QK norms, ReZero / LayerScale
    gains, gates, hyper-connection matrices) takes hidden_other's depth-only lr; an untied head (the reference ties
    it to wte) joins the embedding group; an embedding norm is in `outside` with the final norm. m_L is per
    stack (an encoder-decoder's two stacks each have their own depth); the reference has one stack and one eps
    for all groups, which is what one stack gives here. Only the optimizer side of width is here: muP's
    forward rules (hidden init variance / m_N, output logits / m_N) are not in normjax, so a width multiplier
    other than 1 is only part of muP.

    Attributes:
      alpha: the depth exponent, in [0.5, 1].
      width_multiplier: m_N.
      depth_multipliers: ((stack, m_L), ...) in call order; the head reads the last stack's.
    """

    alpha: float = 1.0
    width_multiplier: float = 1.0
    depth_multipliers: tuple = (("decoder", 1.0),)

    def __post_init__(self):
        if not 0.5 <= self.alpha <= 1.0:
            raise ValueError(f"CompleteP alpha={self.alpha!r} is invalid: must be in [0.5, 1] (CompleteP 1)")
        values = [self.width_multiplier] + [m for _, m in self.depth_multipliers]
        if not self.depth_multipliers or not all(math.isfinite(v) and v > 0 for v in values):
            raise ValueError(
                f"CompleteP multipliers must be finite and > 0: width {self.width_multiplier!r}, "
                f"depth {self.depth_multipliers!r}"
            )

    def depth(self, stack: str) -> float:
        """m_L of `stack`."""
        return dict(self.depth_multipliers)[stack]

    def multipliers(self, group: str, stack: str) -> tuple[float, float, float]:
        """(lr, eps, weight decay) multipliers of `group` in `stack` (the table above)."""
        m_N, m_L, a = self.width_multiplier, self.depth(stack), self.alpha
        eps = m_N**-1 * m_L**-a
        lr, wd = {
            "embedding": (1.0, 1.0),
            "hidden_weight": (m_N**-1 * m_L ** (a - 1), m_N),
            "hidden_other": (m_L ** (a - 1), 0.0),
            "outside": (1.0, 0.0),
        }[group]
        return lr, eps, wd

    def group(self, path) -> tuple[str, str]:
        """(group, stack) of the parameter at `path` (a key path into the model's nnx.State of params)."""
        names = [str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path]
        top, stacks = names[0], [s for s, _ in self.depth_multipliers]
        if top == "stacks" and names[1] in stacks:
            if names[2] == "layers":
                return ("hidden_weight" if "kernel" in names else "hidden_other"), names[1]
            return "outside", names[1]
        if top == "embedders" and names[1] in stacks:
            return ("outside" if names[2] == "norm" else "embedding"), names[1]
        if top == "head":
            return "embedding", stacks[-1]
        raise ValueError(f"CompleteP has no rule for parameter {'/'.join(names)} (stacks {stacks})")

    def labels(self, params):
        """The tree of "group/stack" labels of `params` (optax.multi_transform's param_labels)."""
        return jax.tree_util.tree_map_with_path(lambda path, _: "/".join(self.group(path)), params)


def from_model(cfg, base_width: int = 0) -> CompleteP:
    """The CompleteP multipliers of a ModelConfig relative to a base of width `base_width` (0: cfg.d_model) and
    depth cfg.branch_multiplier_base_depth, with alpha = cfg.branch_multiplier_alpha (the forward half)."""
    if cfg.branch_multiplier_alpha is None:
        raise ValueError(
            "CompleteP's optimizer rules need its forward branch multiplier: set the model's "
            "branch_multiplier_alpha (1.0 for CompleteP) and branch_multiplier_base_depth (L_base)"
        )
    if base_width < 0:
        raise ValueError(f"base_width={base_width!r} is invalid: must be >= 0 (0 = the model's d_model)")
    depths = tuple((s, cfg.stack_depth(s) / cfg.branch_multiplier_base_depth) for s in cfg.stacks)
    return CompleteP(cfg.branch_multiplier_alpha, cfg.d_model / (base_width or cfg.d_model), depths)


def direction(cp: CompleteP, b1: float, b2: float, eps: float) -> optax.GradientTransformation:
    """Adam's direction with each group's eps (optax.multi_transform over `cp.labels`); the lr comes in updates."""
    labels = [f"{g}/{s}" for g in GROUPS for s, _ in cp.depth_multipliers]
    scaled = {
        label: optax.scale_by_adam(b1=b1, b2=b2, eps=eps * cp.multipliers(*label.split("/"))[1]) for label in labels
    }
    return optax.multi_transform(scaled, cp.labels)


def updates(cp: CompleteP, step_dir, params, lr, weight_decay):
    """-lr r (u + weight_decay w p) per leaf, r and w the lr and weight-decay multipliers of its group."""

    def one(path, u, p):
        r, _, w = cp.multipliers(*cp.group(path))
        return (-lr * r * (u + weight_decay * w * p)).astype(p.dtype)

    return jax.tree_util.tree_map_with_path(one, step_dir, params)
