"""Any function as a pure flat map with its parameters and closed-over arrays as traced arguments."""

# `convert(f, x, params)` traces `f` once (`jax.make_jaxpr`, milliseconds) into a jaxpr whose every
# array (module weights, closed-over arrays, the arrays of `params`, the constants an inner `jax.jit`
# captured) is an explicit input. Programs are compiled per structural key (a hash of the jaxpr's
# equations, its argument shapes and dtypes, and the identity of any custom derivative rule), so a new
# closure of the same structure (another block, the model after training) reuses one compiled program,
# while every call reads the current values: never stale by construction. Inputs and outputs are cast
# to one working dtype (`checks.working_dtype`), so every vector and J itself have that dtype.

from __future__ import annotations

import collections
import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex
from jax.flatten_util import ravel_pytree

from normjax.jacobian import checks, jaxpr_eval, structure

_CACHE_SIZE = 512
_CANONICAL: collections.OrderedDict[str, PureFn] = collections.OrderedDict()
_ARRAY = (jax.Array, np.ndarray, np.generic)


@dataclasses.dataclass(frozen=True, eq=False)
class PureFn:
    """y_M = fn(args, x_N) in the working `dtype`: the canonical jaxpr of one structure, hashable by its key.

    Passed as a static argument to `jax.jit`: equal keys share one compiled program. x_N is cast to the
    function's own input dtype and its output to `dtype` (`checks.working_dtype`); `precision` is the
    narrowest floating dtype the function computes in.
    """

    key: str
    jaxpr: Any  # jax.extend.core.Jaxpr, the first one traced with this key
    num_consts: int
    dtype: np.dtype
    precision: np.dtype

    def __call__(self, args, x_N):
        in_dtype = self.jaxpr.invars[-1].aval.dtype
        y_M = jex.jaxpr_as_fun(jex.ClosedJaxpr(self.jaxpr, list(args[: self.num_consts])))(
            *args[self.num_consts :], x_N.astype(in_dtype)
        )[0]
        return y_M.astype(self.dtype)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, PureFn) and other.key == self.key


@dataclasses.dataclass(frozen=True)
class Converted:
    """`f` at `x` as a pure flat map: fn(args, x_N) == ravel(f(x)) in the working dtype `fn.dtype`.

    unravel_x / out_shapes describe the pytrees (unravel_x takes x's own raveled dtype).
    """

    fn: PureFn
    args: tuple
    x_N: jax.Array  # noqa: N815 (shape-suffix convention, STYLE.md)
    out_size: int
    out_shapes: Any  # pytree of jax.ShapeDtypeStruct, like f(x)
    unravel_x: Callable

    @property
    def dtype(self) -> np.dtype:
        return self.fn.dtype


def _canonical(closed, num_consts: int) -> PureFn:
    key, floats = structure.structural_key(closed)
    fn = _CANONICAL.get(key)
    if fn is None:
        fn = PureFn(key, closed.jaxpr, num_consts, *structure.dtypes(closed, floats))
        _CANONICAL[key] = fn
        if len(_CANONICAL) > _CACHE_SIZE:
            _CANONICAL.popitem(last=False)
    else:
        _CANONICAL.move_to_end(key)
    return fn


def _path(name: str, path) -> str:
    return f"{name}{jax.tree_util.keystr(path)}"


def ravel_floats(what: str, tree) -> tuple[jax.Array, Callable]:
    leaves = jax.tree_util.tree_leaves_with_path(tree)
    if not leaves:
        raise TypeError(f"{what} has no array leaves.")
    for path, leaf in leaves:
        if isinstance(leaf, bool) or not isinstance(leaf, (*_ARRAY, float, int)):
            raise TypeError(
                f"{what} must be an array or a pytree (dict, list, tuple, ...) of arrays, got a leaf "
                f"{_path(what, path)} of type {type(leaf).__name__}."
            )
        if not jnp.issubdtype(jnp.result_type(leaf), jnp.floating):
            raise TypeError(
                f"{what} must have floating dtypes to be differentiated, got {jnp.result_type(leaf)} at "
                f"{_path(what, path)}."
            )
    return ravel_pytree(tree)


def check_output(y) -> None:
    """TypeError naming the first leaf of f(x) that is not a floating array (a returned state, a count)."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(y):
        dtype = jnp.result_type(leaf) if isinstance(leaf, (*_ARRAY, float, int)) else None
        if dtype is None or isinstance(leaf, bool) or not jnp.issubdtype(dtype, jnp.floating):
            got = f"dtype {dtype}" if dtype is not None else f"type {type(leaf).__name__}"
            raise TypeError(
                f"f(x) must return (a pytree of) floating arrays, but its output {_path('f(x)', path)} has {got}: "
                "return only the arrays to differentiate (for f returning (y, state): lambda x: f(x)[0])."
            )


@dataclasses.dataclass(frozen=True)
class Call:
    """A model whose forward needs more than x (positions, masks, caches, an rng): `call(model, x) -> y`.

    Pass it where f goes (`jacobian.with_call(model, call)`): an nnx.Module's state, or any other pytree model
    (equinox, penzai, a params dict), becomes the compiled program's argument, as for a model passed directly.
    """

    model: Any
    call: Callable


def with_call(model, call: Callable) -> Call:
    """`model` analysed as x -> call(model, x); e.g. `with_call(block, lambda m, x: m(x, positions=pos))`."""
    if not callable(call):
        raise TypeError(f"with_call: call must be a function call(model, x), got {type(call).__name__}.")
    return Call(model, call)


def is_nnx_module(obj) -> bool:
    """Whether obj is a flax.nnx.Module, judged by its type's module names: flax is never imported to ask."""
    return any(c.__name__ == "Module" and c.__module__.startswith("flax.nnx") for c in type(obj).__mro__)


def _split_nnx(module, call: Callable) -> tuple[Callable, Any]:
    """(lambda state, x: call(module rebuilt from state, x), state): flax loads only here, for a flax object."""
    from flax import nnx

    graphdef, state = nnx.split(module)
    return lambda p, x: call(nnx.merge(graphdef, p, copy=True), x), state


def as_callable(f, params=None) -> tuple[Callable, Any]:
    """f as a function of (params, x): an nnx.Module is split so its state is an explicit argument."""
    if isinstance(f, Call):
        if params is not None:
            raise TypeError("pass either with_call(model, call) or params=, not both.")
        if is_nnx_module(f.model):
            return _split_nnx(f.model, f.call)
        return f.call, f.model
    if is_nnx_module(f):
        if params is not None:
            raise TypeError("pass either an nnx.Module or params=, not both.")
        return _split_nnx(f, lambda m, x: m(x))
    if not callable(f):
        raise TypeError(
            f"f must be a callable f(x), f(params, x) with params=, or an nnx.Module, got {type(f).__name__}."
        )
    if params is None:
        return lambda p, x: f(x), ()
    return f, params


def split_params(params) -> tuple[list, Callable]:
    """(array leaves, rebuild): the arrays of params become arguments; other leaves (an equinox module's
    activation function, an int, a string) are static, traced into the jaxpr and so part of its key."""
    leaves, tree = jax.tree.flatten(params)
    is_array = [isinstance(leaf, _ARRAY) for leaf in leaves]
    static = [None if a else leaf for leaf, a in zip(leaves, is_array, strict=True)]

    def rebuild(arrays):
        it = iter(arrays)
        return jax.tree.unflatten(tree, [next(it) if a else s for a, s in zip(is_array, static, strict=True)])

    return [leaf for leaf, a in zip(leaves, is_array, strict=True) if a], rebuild


CLOSURE_FIX = (
    "pass the module itself (jacobian.spectral_norm(module, x)), or close over a copy: graphdef, state = "
    "nnx.split(module); f = lambda x: nnx.merge(graphdef, state, copy=True)(x)"
)


def _trace_module_safe(flat, p_leaves, x_N):
    """jax.make_jaxpr(flat)(p_leaves, x_N); flax's trace-level errors (a closure over an nnx.Module that sows,
    draws from nnx.Rngs or runs nnx.scan mutates it inside our trace) become one TypeError with the fix."""
    try:
        return jax.make_jaxpr(flat)(p_leaves, x_N)
    except Exception as e:
        flax_errors = sys.modules.get("flax.errors")  # loaded if f raised one of its errors
        trace_errors = (ValueError,) + ((flax_errors.TraceContextError,) if flax_errors is not None else ())
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        if not isinstance(e, trace_errors) or "trace level" not in first:
            raise
        raise TypeError(
            "normjax.jacobian: f closes over an nnx.Module that it mutates or splits while traced (sow, "
            f"nnx.Rngs/dropout, nnx.scan), which flax forbids (flax: {first.split(', got')[0].split(' (http')[0]}): "
            f"{CLOSURE_FIX}."
        ) from None


def convert(f, x, params=None, stop_gradient: str = "constant") -> Converted:
    """Traces f at x into a `PureFn` and its argument list (consts, then the array leaves of params).

    Args:
      f: f(x), f(params, x) when `params` is given, or an nnx.Module (called as module(x)).
      x: floating array or pytree of floating arrays.
      params: any pytree; its array leaves are arguments, the rest static.
      stop_gradient: "constant" keeps f's `stop_gradient`s (their operands are constants to every derivative of
        the PureFn, as to backpropagation); "identity" drops them (`jaxpr_eval.eval_inlined`), so derivatives are
        those of the map f computes.

    Raises:
      TypeError: f is not callable, x or f(x) is not a (pytree of) floating array(s). ValueError: stop_gradient
      is not one of `jaxpr_eval.STOP_GRADIENT_MODES`, or "identity" meets one inside a scan, loop or cond.
    """
    if stop_gradient not in jaxpr_eval.STOP_GRADIENT_MODES:
        raise ValueError(f"stop_gradient must be one of {jaxpr_eval.STOP_GRADIENT_MODES}, got {stop_gradient!r}.")
    call, params = as_callable(f, params)
    x_N, unravel_x = ravel_floats("x", x)
    p_leaves, rebuild = split_params(params)
    shapes = {}

    def flat(p_leaves, x_N):
        y = call(rebuild(p_leaves), unravel_x(x_N))
        check_output(y)
        shapes["out"] = jax.tree.map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), y)
        return ravel_pytree(y)[0] if jax.tree.leaves(y) else jnp.zeros((0,), x_N.dtype)

    closed = _trace_module_safe(flat, p_leaves, x_N)
    identity = stop_gradient == "identity" and jaxpr_eval.has_stop_gradient(closed.jaxpr)
    if identity or jaxpr_eval.has_jit_consts(closed.jaxpr):
        closed = jax.make_jaxpr(
            lambda *a: jaxpr_eval.eval_inlined(closed.jaxpr, closed.consts, a, stop_gradient=stop_gradient)
        )(*p_leaves, x_N)
    consts = list(closed.consts)
    fn = _canonical(closed, len(consts))
    args = tuple(consts) + tuple(p_leaves)
    out_size = closed.jaxpr.outvars[0].aval.shape[0]
    return Converted(fn, args, x_N.astype(fn.dtype), out_size, shapes["out"], unravel_x)


def validate(conv: Converted) -> None:
    """Raises ValueError when x has NaN/inf entries (host-level entry points only)."""
    checks.require_finite("x", conv.x_N)


_evaluate = jax.jit(lambda fn, args, x_N: fn(args, x_N), static_argnums=0)


def evaluate(f, x, params=None):
    """f(x) (or f(params, x)) through the structure cache: one compile per structure, a pytree like f's."""
    conv = convert(f, x, params)
    y_M = _evaluate(conv.fn, conv.args, conv.x_N)
    flat0, unravel = ravel_pytree(jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), conv.out_shapes))
    return unravel(y_M.astype(flat0.dtype))
