"""Jaxprs evaluated with inner jits inlined, and with Monte Carlo arithmetic (every rounding perturbed)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend import core as jex


def has_jit_consts(jaxpr) -> bool:
    """Whether an inner `jax.jit` (at any depth of jits) captured arrays as constants of its own jaxpr."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "jit" and (eqn.params["jaxpr"].consts or has_jit_consts(eqn.params["jaxpr"].jaxpr)):
            return True
    return False


# Primitives whose outputs are exact given their inputs (data movement, selection, sign changes): never
# perturbed by `perturbed_eval`.
_EXACT_PRIMITIVES = frozenset(
    {
        "reshape",
        "broadcast_in_dim",
        "transpose",
        "squeeze",
        "expand_dims",
        "slice",
        "dynamic_slice",
        "dynamic_update_slice",
        "concatenate",
        "pad",
        "gather",
        "select_n",
        "copy",
        "copy_p",
        "neg",
        "rev",
        "reduce_max",
        "reduce_min",
        "max",
        "min",
        "abs",
        "sign",
        "stop_gradient",
        "iota",
        "sort",
        "argmax",
        "argmin",
        "split",
    }
)


# How the Jacobian tools treat `jax.lax.stop_gradient`: "constant" (its operand is a constant, as backpropagation
# and jax.jacfwd see it) or "identity" (the forward map's derivative: stop_gradient replaced by the identity).
STOP_GRADIENT_MODES = ("constant", "identity")
# Higher-order primitives whose derivative is their custom rule: a stop_gradient in their body changes nothing.
_CUSTOM_RULES = frozenset({"custom_jvp_call", "custom_vjp_call", "custom_vjp_call_jaxpr"})


def _sub_jaxprs(params):
    for value in params.values():
        for v in value if isinstance(value, tuple | list) else (value,):
            if isinstance(v, jex.ClosedJaxpr):
                yield v.jaxpr
            elif isinstance(v, jex.Jaxpr):
                yield v


def _nested_stop_gradient(eqn) -> bool:
    return eqn.primitive.name not in _CUSTOM_RULES and any(map(has_stop_gradient, _sub_jaxprs(eqn.params)))


def has_stop_gradient(jaxpr) -> bool:
    """Whether a `stop_gradient` equation sits in jaxpr or, at any depth, in a sub-jaxpr outside custom rules."""
    return any(eqn.primitive.name == "stop_gradient" or _nested_stop_gradient(eqn) for eqn in jaxpr.eqns)


def eval_inlined(jaxpr, consts, args, perturb=None, stop_gradient="constant") -> list:
    """`jax.core.eval_jaxpr` with every `jit` equation replaced by its body: traced under `make_jaxpr`,
    the arrays an inner jit captured (a `jax.jit` closure's weights) become constants of the outer jaxpr,
    so they are arguments of the compiled program, not contents hashed into its key. `perturb(primitive,
    outs)`, when given, rewrites each equation's outputs (`perturbed_eval`). `stop_gradient="identity"`
    evaluates every `stop_gradient` as the identity (one inside a scan, loop or cond raises ValueError)."""
    env: dict = {}
    identity = stop_gradient == "identity"

    def read(v):
        return v.val if isinstance(v, jex.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if eqn.primitive.name == "jit":
            inner = eqn.params["jaxpr"]
            outs = eval_inlined(inner.jaxpr, inner.consts, invals, perturb, stop_gradient)
        elif identity and eqn.primitive.name == "stop_gradient":
            outs = invals
        else:
            if identity and _nested_stop_gradient(eqn):
                raise ValueError(
                    f"stop_gradient='identity' replaces stop_gradient at any depth of jax.jit, but f has one inside "
                    f"a `{eqn.primitive.name}`: use stop_gradient='constant' (the Jacobian backpropagation uses), or "
                    "write f without it"
                )
            outs = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))
            outs = outs if eqn.primitive.multiple_results else [outs]
            outs = outs if perturb is None else perturb(eqn.primitive.name, outs)
        env.update(zip(eqn.outvars, outs, strict=True))
    return [read(v) for v in jaxpr.outvars]


# XLA's transcendental functions are not correctly rounded (tanh measured at up to 2.7 eps relative on
# CPU, float32 and float64): their outputs are perturbed by this many eps.
_TRANSCENDENTAL_EPS = 4.0
_TRANSCENDENTAL = frozenset(
    {"tanh", "exp", "exp2", "log", "log1p", "expm1", "logistic", "sin", "cos", "tan", "atan2", "erf", "erfc"}
    | {"erf_inv", "pow", "rsqrt", "cbrt", "lgamma", "digamma", "asin", "acos", "atan", "sinh", "cosh", "asinh"}
    | {"acosh", "atanh"}
)


def perturbed_eval(closed, flat_args, seed, scale: float = 1.0):
    """The first output of a ClosedJaxpr with every rounding operation's floating output multiplied by
    (1 + c eps r).

    r = +-1 pseudo-random per entry and `seed`, eps that of the output's dtype, c = 1 (c =
    _TRANSCENDENTAL_EPS for transcendental functions): one draw of Monte Carlo arithmetic (Parker 1997).
    Given the jaxpr that computes J (derivative rules included, so 1 - tanh(z)^2 at a saturated tanh is
    perturbed as it is computed), the spread of J over draws estimates J's own rounding, amplification by
    the function's conditioning included. Higher-order primitives (scan, cond, custom derivative calls)
    are perturbed at their outputs only. `scale` multiplies c (0.5: every rounding by its largest size under
    round-to-nearest, the unit roundoff, with a random sign). `seed` may be traced (`perturbed_draws`).
    """
    count = [0]

    def perturb(name, outs):
        if name in _EXACT_PRIMITIVES:
            return outs
        size = scale * (_TRANSCENDENTAL_EPS if name in _TRANSCENDENTAL else 1.0)
        new = []
        for out in outs:
            if hasattr(out, "dtype") and jnp.issubdtype(out.dtype, jnp.floating) and out.size:
                count[0] += 1
                offset = jnp.asarray(seed, jnp.uint32) * jnp.uint32(1_000_003) + jnp.uint32(count[0] * 7919 % 2**32)
                bits = jnp.arange(out.size, dtype=jnp.uint32) * jnp.uint32(0x9E3779B9) + offset
                bits = (bits ^ (bits >> 16)) * jnp.uint32(0x7FEB352D)
                sign = jnp.where((bits >> 31) == 1, 1.0, -1.0).astype(out.dtype).reshape(out.shape)
                out = out * (1 + size * jnp.finfo(out.dtype).eps * sign)
            new.append(out)
        return new

    return eval_inlined(closed.jaxpr, closed.consts, flat_args, perturb)[0]


def perturbed_draws(closed, flat_args, draws: int, scale: float = 1.0):
    """`perturbed_eval` for seeds 0 .. draws - 1, stacked on a leading axis: one traced body (`lax.map` over the
    seed), so the program compiles the perturbed computation once, not once per draw."""
    return jax.lax.map(lambda seed: perturbed_eval(closed, flat_args, seed, scale), jnp.arange(draws, dtype=jnp.uint32))
