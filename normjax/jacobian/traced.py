"""Any function as a pure flat map with its parameters and closed-over arrays as traced arguments."""

# `convert(f, x, params)` traces `f` once (`jax.make_jaxpr`, milliseconds) into a jaxpr whose every
# array (module weights, closed-over arrays, `params`) is an explicit input. Programs are compiled per
# structural key (the printed jaxpr, its argument shapes and dtypes, and the identity of any custom
# derivative rule), so a new closure of the same structure (another block, the model after training)
# reuses one compiled program, while every call reads the current values: never stale by construction.

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import types
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.extend import core as jex
from jax.flatten_util import ravel_pytree

from normjax.jacobian import checks

_CACHE_SIZE = 512
_CANONICAL: collections.OrderedDict[str, PureFn] = collections.OrderedDict()
_SIMPLE = (str, int, float, bool, complex, type(None), np.dtype)


@dataclasses.dataclass(frozen=True, eq=False)
class PureFn:
    """y_M = fn(args, x_N): the canonical jaxpr of one structure, hashable by its structural key.

    Passed as a static argument to `jax.jit`: equal keys share one compiled program.
    """

    key: str
    jaxpr: Any  # jax.extend.core.Jaxpr, the first one traced with this key
    num_consts: int

    def __call__(self, args, x_N):
        return jex.jaxpr_as_fun(jex.ClosedJaxpr(self.jaxpr, list(args[: self.num_consts])))(
            *args[self.num_consts :], x_N
        )[0]

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other) -> bool:
        return isinstance(other, PureFn) and other.key == self.key


@dataclasses.dataclass(frozen=True)
class Converted:
    """`f` at `x` as a pure flat map: fn(args, x_N) == ravel(f(x)); unravel_x / out_shapes describe the pytrees."""

    fn: PureFn
    args: tuple
    x_N: jax.Array  # noqa: N815 (shape-suffix convention, STYLE.md)
    out_size: int
    out_shapes: Any  # pytree of jax.ShapeDtypeStruct, like f(x)
    unravel_x: Callable


def _array_digest(value) -> str:
    a = np.asarray(value)
    return f"{a.dtype}{a.shape}:" + hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest()


def _param_tokens(value, out: list) -> None:
    """Appends what str() of a jaxpr may not pin down: array contents, identities of rule objects."""
    if isinstance(value, jex.ClosedJaxpr):
        out.extend(_array_digest(c) for c in value.consts)
        _jaxpr_tokens(value.jaxpr, out)
    elif isinstance(value, jex.Jaxpr):
        _jaxpr_tokens(value, out)
    elif isinstance(value, tuple | list):
        for v in value:
            _param_tokens(v, out)
    elif isinstance(value, np.ndarray | jax.Array):
        out.append(_array_digest(value))
    elif isinstance(value, types.FunctionType) or hasattr(value, "call_wrapped"):
        out.append(_rule_identity(value))


def _rule_identity(value) -> str:
    """Identity of the custom_jvp/custom_vjp objects (or module-level rule functions) behind a rule thunk.

    JAX wraps a rule in fresh thunks on every trace; the `jax.custom_jvp`/`jax.custom_vjp` objects they
    close over, or the module-level function given to `defjvp` (the function a thunk wraps, never one met
    in a closure, which may hold other values), are what stays the same. Unknown shapes fall back to the
    thunk's own identity (a separate compile, never a wrong rule). The canonical jaxpr keeps these alive.
    The key also holds the values the rules read from globals and closures (`_values_read`).
    """
    found, seen, todo = [], set(), [(value, 0, False)]
    while todo:
        obj, depth, wrapped = todo.pop()
        if id(obj) in seen or depth > 8:
            continue
        seen.add(id(obj))
        if isinstance(obj, jax.custom_jvp | jax.custom_vjp) or (wrapped and _module_level_rule(obj)):
            found.append(f"{id(obj)}{_values_read(obj)}")
            continue
        if hasattr(obj, "call_wrapped"):
            todo.append((obj.f, depth + 1, True))
        for cell in getattr(obj, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # an empty cell
                todo.append((cell.cell_contents, depth + 1, False))
    return f"rules{sorted(found)}" if found else f"id{id(value)}"


def _values_read(rule) -> list:
    """The numbers, strings and arrays a rule reads from module globals or closures, through the plain functions,
    methods, containers and object attributes it reaches (4 levels deep): a rule whose global changes gets a new
    key, never the old program. Of a module or another object, the attributes the reading code names are read
    (`CONFIG.scale`), and so are the arrays of a pytree object (an `nnx.Param`)."""
    if isinstance(rule, jax.custom_jvp | jax.custom_vjp):
        rule = tuple(getattr(rule, name, None) for name in ("jvp", "fwd", "bwd"))
    out, seen, todo = [], set(), [(None, rule, 0, ())]
    while todo:
        name, value, depth, names = todo.pop()  # names: the attribute names the code that reached `value` uses
        if isinstance(value, _SIMPLE):
            out.append((name, repr(value)))
            continue
        if isinstance(value, np.ndarray | jax.Array):
            out.append((name, _array_digest(value)))
            continue
        if depth > 4 or (id(value), names) in seen:
            continue
        seen.add((id(value), names))
        below = depth + 1
        if isinstance(value, tuple | list):
            todo.extend((name, v, below, names) for v in value)
        elif isinstance(value, dict):
            todo.extend((f"{name}[{k!r}]", v, below, names) for k, v in value.items())
        elif isinstance(value, types.MethodType):  # self's attributes, as the method's code names them
            todo.append((name, value.__func__, below, names))
            todo.append((name, value.__self__, below, value.__func__.__code__.co_names))
        elif isinstance(value, types.FunctionType):
            code = value.__code__.co_names
            todo.extend((None, c.cell_contents, below, code) for c in value.__closure__ or () if _has_contents(c))
            todo.extend((n, value.__globals__[n], below, code) for n in code if n in value.__globals__)
        else:  # a module, a config object, an nnx.Variable: what the reading code names, and its pytree arrays
            leaves = jax.tree.leaves(value)
            if len(leaves) != 1 or leaves[0] is not value:
                todo.extend((name, leaf, below, names) for leaf in leaves)
            for n in names:
                with contextlib.suppress(Exception):  # no such attribute, or a property that raises
                    todo.append((f"{name}.{n}", getattr(value, n), below, names))
    return out


def _has_contents(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # an empty cell
        return False
    return True


def _module_level_rule(obj) -> bool:
    """A function with no closure defined at module level: given to `defjvp`, it alone is the rule."""
    return isinstance(obj, types.FunctionType) and obj.__closure__ is None and "<locals>" not in obj.__qualname__


def _jaxpr_tokens(jaxpr, out: list) -> None:
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            if isinstance(v, jex.Literal) and np.ndim(v.val) > 0:
                out.append(_array_digest(v.val))
        for value in eqn.params.values():
            _param_tokens(value, out)


def structural_key(closed) -> str:
    """The printed jaxpr plus argument avals and everything printing does not pin down."""
    tokens = [str(closed.jaxpr), repr([v.aval for v in closed.jaxpr.invars])]
    tokens.append(repr([(jnp.shape(c), jnp.result_type(c), getattr(c, "weak_type", None)) for c in closed.consts]))
    _jaxpr_tokens(closed.jaxpr, tokens)
    return "\n".join(tokens)


def _canonical(closed, num_consts: int) -> PureFn:
    key = structural_key(closed)
    fn = _CANONICAL.get(key)
    if fn is None:
        fn = PureFn(key, closed.jaxpr, num_consts)
        _CANONICAL[key] = fn
        if len(_CANONICAL) > _CACHE_SIZE:
            _CANONICAL.popitem(last=False)
    else:
        _CANONICAL.move_to_end(key)
    return fn


def _ravel_floats(what: str, tree) -> tuple[jax.Array, Callable]:
    leaves = jax.tree.leaves(tree)
    if not leaves:
        raise TypeError(f"{what} has no array leaves.")
    for leaf in leaves:
        if isinstance(leaf, bool) or not isinstance(leaf, jax.Array | np.ndarray | np.generic | float | int):
            raise TypeError(
                f"{what} must be an array or a pytree (dict, list, tuple, ...) of arrays, got a leaf of type "
                f"{type(leaf).__name__}."
            )
        if not jnp.issubdtype(jnp.result_type(leaf), jnp.floating):
            raise TypeError(f"{what} must have floating dtypes to be differentiated, got {jnp.result_type(leaf)}.")
    return ravel_pytree(tree)


def as_callable(f, params=None) -> Callable:
    """f as a function of (params, x): an nnx.Module is split so its state is an explicit argument."""
    if isinstance(f, nnx.Module):
        if params is not None:
            raise TypeError("pass either an nnx.Module or params=, not both.")
        graphdef, state = nnx.split(f)
        return lambda p, x: nnx.merge(graphdef, p, copy=True)(x), state
    if not callable(f):
        raise TypeError(
            f"f must be a callable f(x), f(params, x) with params=, or an nnx.Module, got {type(f).__name__}."
        )
    if params is None:
        return lambda p, x: f(x), ()
    return f, params


def convert(f, x, params=None) -> Converted:
    """Traces f at x into a `PureFn` and its argument list (consts, then the leaves of params).

    Args:
      f: f(x), f(params, x) when `params` is given, or an nnx.Module (called as module(x)).
      x: floating array or pytree of floating arrays.
      params: any pytree of arrays, or None.

    Raises:
      TypeError: f is not callable, x or f(x) is not a (pytree of) floating array(s).
    """
    call, params = as_callable(f, params)
    x_N, unravel_x = _ravel_floats("x", x)
    p_leaves, p_tree = jax.tree.flatten(params)
    shapes = {}

    def flat(p_leaves, x_N):
        y = call(jax.tree.unflatten(p_tree, p_leaves), unravel_x(x_N))
        shapes["out"] = jax.tree.map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), y)
        for leaf in jax.tree.leaves(y):
            if not jnp.issubdtype(jnp.result_type(leaf), jnp.floating):
                raise TypeError(f"f(x) must be a (pytree of) floating array(s), got dtype {jnp.result_type(leaf)}.")
        return ravel_pytree(y)[0] if jax.tree.leaves(y) else jnp.zeros((0,), x_N.dtype)

    closed = jax.make_jaxpr(flat)(p_leaves, x_N)
    consts = list(closed.consts)
    fn = _canonical(closed, len(consts))
    out_size = closed.jaxpr.outvars[0].aval.shape[0]
    return Converted(fn, tuple(consts) + tuple(p_leaves), x_N, out_size, shapes["out"], unravel_x)


def validate(conv: Converted) -> None:
    """Raises ValueError when x has NaN/inf entries (host-level entry points only)."""
    checks.require_finite("x", conv.x_N)


_evaluate = jax.jit(lambda fn, args, x_N: fn(args, x_N), static_argnums=0)


def evaluate(f, x, params=None):
    """f(x) (or f(params, x)) through the structure cache: one compile per structure, a pytree like f's."""
    conv = convert(f, x, params)
    y_M = _evaluate(conv.fn, conv.args, conv.x_N)
    _, unravel = ravel_pytree(jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), conv.out_shapes))
    return unravel(y_M)
