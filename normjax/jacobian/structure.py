"""Structural keys of traced functions: jaxprs hashed by equation, avals and custom-rule identity; their dtypes."""

from __future__ import annotations

import contextlib
import hashlib
import types

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex

from normjax.jacobian import checks

_SIMPLE = (str, int, float, bool, complex, type(None), np.dtype)


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
