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
import contextlib
import dataclasses
import hashlib
import types
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import errors as flax_errors
from flax import nnx
from jax.extend import core as jex
from jax.flatten_util import ravel_pytree

from normjax.jacobian import checks

_CACHE_SIZE = 512
_CANONICAL: collections.OrderedDict[str, PureFn] = collections.OrderedDict()
_SIMPLE = (str, int, float, bool, complex, type(None), np.dtype)
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


def _array_digest(value) -> str:
    a = np.asarray(value)
    return f"{a.dtype}{a.shape}:" + hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest()


class _Structure:
    """Hashes jaxprs equation by equation (never printing them) and notes the floating dtypes computed in.

    A sub-jaxpr met twice (one jitted layer called L times, a scan body) is hashed once.
    """

    def __init__(self):
        self.memo: dict[int, str] = {}
        self.avals: dict = {}
        self.floats: set = set()

    def jaxpr(self, jaxpr) -> str:
        if id(jaxpr) not in self.memo:
            self.memo[id(jaxpr)] = self._digest(jaxpr)
        return self.memo[id(jaxpr)]

    def aval(self, aval) -> str:
        token = self.avals.get(aval)
        if token is None:
            token = self.avals[aval] = repr(aval)
            dtype = getattr(aval, "dtype", None)
            if dtype is not None and dtype not in self.floats and jnp.issubdtype(dtype, jnp.floating):
                self.floats.add(dtype)
        return token

    def _digest(self, jaxpr) -> str:
        names: dict = {}
        h = hashlib.blake2b(digest_size=20)

        def ref(v) -> str:
            if isinstance(v, jex.Literal):
                val = np.asarray(v.val)
                return f"{val.dtype}{val.shape}{val.tobytes().hex()}:{self.aval(v.aval)}"
            return names.setdefault(v, f"v{len(names)}")

        h.update(",".join(f"{ref(v)}:{self.aval(v.aval)}" for v in (*jaxpr.constvars, *jaxpr.invars)).encode())
        for eqn in jaxpr.eqns:
            ins = ",".join(ref(v) for v in eqn.invars)
            outs = ",".join(f"{'_' if isinstance(v, jex.DropVar) else ref(v)}:{self.aval(v.aval)}" for v in eqn.outvars)
            params = ";".join(f"{k}={self.value(p)}" for k, p in sorted(eqn.params.items()))
            h.update(f"{eqn.primitive.name}({ins})->{outs}[{params}]\n".encode())
        h.update(",".join(ref(v) for v in jaxpr.outvars).encode())
        return h.hexdigest()

    def value(self, value) -> str:
        """A parameter's token: sub-jaxprs by hash, arrays by contents, rule objects by identity."""
        if isinstance(value, jex.ClosedJaxpr):
            return f"{self.jaxpr(value.jaxpr)}{[_array_digest(c) for c in value.consts]}"
        if isinstance(value, jex.Jaxpr):
            return self.jaxpr(value)
        if isinstance(value, tuple | list):
            return f"({','.join(self.value(v) for v in value)})"
        if isinstance(value, np.ndarray | jax.Array):
            return _array_digest(value)
        if isinstance(value, types.FunctionType) or hasattr(value, "call_wrapped"):
            return _rule_identity(value)
        return repr(value)


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


def structural_key(closed) -> tuple[str, set]:
    """(a hash of the jaxpr, its argument avals and what a jaxpr does not pin down; its floating dtypes)."""
    walker = _Structure()
    consts = [(jnp.shape(c), jnp.result_type(c), getattr(c, "weak_type", None)) for c in closed.consts]
    key = hashlib.blake2b(f"{walker.jaxpr(closed.jaxpr)}{consts!r}".encode(), digest_size=20).hexdigest()
    return key, walker.floats


def dtypes(closed, floats=None) -> tuple[np.dtype, np.dtype]:
    """(working dtype, precision) of a flat map's jaxpr R^N -> R^M: its input and output dtypes promoted
    (`checks.working_dtype`), and the narrowest floating dtype it computes in (`floats`, else walked)."""
    in_dtype, out_dtype = closed.jaxpr.invars[-1].aval.dtype, closed.jaxpr.outvars[0].aval.dtype
    floats = structural_key(closed)[1] if floats is None else floats
    return checks.working_dtype(in_dtype, out_dtype), checks.narrowest(floats | {in_dtype, out_dtype})


def _canonical(closed, num_consts: int) -> PureFn:
    key, floats = structural_key(closed)
    fn = _CANONICAL.get(key)
    if fn is None:
        fn = PureFn(key, closed.jaxpr, num_consts, *dtypes(closed, floats))
        _CANONICAL[key] = fn
        if len(_CANONICAL) > _CACHE_SIZE:
            _CANONICAL.popitem(last=False)
    else:
        _CANONICAL.move_to_end(key)
    return fn


def _has_jit_consts(jaxpr) -> bool:
    """Whether an inner `jax.jit` (at any depth of jits) captured arrays as constants of its own jaxpr."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "jit" and (eqn.params["jaxpr"].consts or _has_jit_consts(eqn.params["jaxpr"].jaxpr)):
            return True
    return False


# Primitives whose outputs are exact given their inputs (data movement, selection, sign changes): never
# perturbed by `perturbed_call`.
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


def _eval_inlined(jaxpr, consts, args, perturb=None) -> list:
    """`jax.core.eval_jaxpr` with every `jit` equation replaced by its body: traced under `make_jaxpr`,
    the arrays an inner jit captured (a `jax.jit` closure's weights) become constants of the outer jaxpr,
    so they are arguments of the compiled program, not contents hashed into its key. `perturb(primitive,
    outs)`, when given, rewrites each equation's outputs (`perturbed_call`)."""
    env: dict = {}

    def read(v):
        return v.val if isinstance(v, jex.Literal) else env[v]

    env.update(zip(jaxpr.constvars, consts, strict=True))
    env.update(zip(jaxpr.invars, args, strict=True))
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if eqn.primitive.name == "jit":
            inner = eqn.params["jaxpr"]
            outs = _eval_inlined(inner.jaxpr, inner.consts, invals, perturb)
        else:
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


def perturbed_eval(closed, flat_args, seed: int):
    """The first output of a ClosedJaxpr with every rounding operation's floating output multiplied by
    (1 + c eps r).

    r = +-1 pseudo-random per entry and `seed`, eps that of the output's dtype, c = 1 (c =
    _TRANSCENDENTAL_EPS for transcendental functions): one draw of Monte Carlo arithmetic (Parker 1997).
    Given the jaxpr that computes J (derivative rules included, so 1 - tanh(z)^2 at a saturated tanh is
    perturbed as it is computed), the spread of J over draws estimates J's own rounding, amplification by
    the function's conditioning included. Higher-order primitives (scan, cond, custom derivative calls)
    are perturbed at their outputs only.
    """
    count = [0]

    def perturb(name, outs):
        if name in _EXACT_PRIMITIVES:
            return outs
        size = _TRANSCENDENTAL_EPS if name in _TRANSCENDENTAL else 1.0
        new = []
        for out in outs:
            if hasattr(out, "dtype") and jnp.issubdtype(out.dtype, jnp.floating) and out.size:
                count[0] += 1
                bits = jnp.arange(out.size, dtype=jnp.uint32) * jnp.uint32(0x9E3779B9) + jnp.uint32(
                    (seed * 1_000_003 + count[0] * 7919) % 2**32
                )
                bits = (bits ^ (bits >> 16)) * jnp.uint32(0x7FEB352D)
                sign = jnp.where((bits >> 31) == 1, 1.0, -1.0).astype(out.dtype).reshape(out.shape)
                out = out * (1 + size * jnp.finfo(out.dtype).eps * sign)
            new.append(out)
        return new

    return _eval_inlined(closed.jaxpr, closed.consts, flat_args, perturb)[0]


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


def as_callable(f, params=None) -> tuple[Callable, Any]:
    """f as a function of (params, x): an nnx.Module is split so its state is an explicit argument."""
    if isinstance(f, Call):
        if params is not None:
            raise TypeError("pass either with_call(model, call) or params=, not both.")
        if isinstance(f.model, nnx.Module):
            graphdef, state = nnx.split(f.model)
            return lambda p, x: f.call(nnx.merge(graphdef, p, copy=True), x), state
        return f.call, f.model
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
    except (flax_errors.TraceContextError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "trace level" not in first:
            raise
        raise TypeError(
            "normjax.jacobian: f closes over an nnx.Module that it mutates or splits while traced (sow, "
            f"nnx.Rngs/dropout, nnx.scan), which flax forbids (flax: {first.split(', got')[0].split(' (http')[0]}): "
            f"{CLOSURE_FIX}."
        ) from None


def convert(f, x, params=None) -> Converted:
    """Traces f at x into a `PureFn` and its argument list (consts, then the array leaves of params).

    Args:
      f: f(x), f(params, x) when `params` is given, or an nnx.Module (called as module(x)).
      x: floating array or pytree of floating arrays.
      params: any pytree; its array leaves are arguments, the rest static.

    Raises:
      TypeError: f is not callable, x or f(x) is not a (pytree of) floating array(s).
    """
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
    if _has_jit_consts(closed.jaxpr):
        closed = jax.make_jaxpr(lambda *a: _eval_inlined(closed.jaxpr, closed.consts, a))(*p_leaves, x_N)
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
