"""Reading diffusers code: which code a class or function reaches, and its positional sites.

Owns the call graph the positional rule walks (``class_sites``, ``function_sites``,
``static_sites``) and the classification of a *site* (``site_kind``).  Everything is
read from code objects (``co_names``, nested code objects, in-function imports), as
``sinpe/torch/hf/_discover.py`` reads transformers' code; nothing is run.

From a class, the walk reads the code of its ``__init__`` (tables made at
construction), ``forward`` and ``__call__`` (attention processors), through its MRO,
with their nested code objects (comprehensions, inner functions), and follows,
recursively and only within diffusers:

- the methods a code object names that its class has (``self._rope(...)``; a property's
  getter too);
- the functions it names by global name (``get_timestep_embedding``) or imports inside
  itself (``from ..embeddings import apply_rotary_emb`` in a processor's ``__call__``);
- attributes named in the same code object of a class or module it names
  (``SomeRope.params(...)``, ``embeddings.get_1d_rotary_pos_embed``), dunders excepted
  (``super().__init__`` names ``__init__`` in every constructor).

A class named in the code is *not* entered as a whole (``static=False``): ``__init__``
code names every class it might construct (``get_down_block`` names all UNet blocks, a
norm switch names every norm); which were constructed, an instance says
(:mod:`.discover`).  ``static_sites`` enters them, and the functions and classes held in
module-level dicts, lists and tuples the code names (registries) and the classes kept as
class attributes (``self._default_processor_cls()``): an over-approximation of what any
instance of the class can reach.

A code object reached that calls ``cos``, ``sin`` or ``polar`` (``torch.cos``,
``x.cos()``, ``math.sin``, ``np.sin``, ``torch.polar`` all put the name in ``co_names``)
is a *site*, of the kind its identifiers (qualified name and local names) say, in this
order: ``rope`` (rotary/rope/freqs_cis/inv_freq, or ``polar``), ``fourier``,
``timestep`` (time..., or a local named ``t``), ``sincos`` (sincos, positional,
pos_embed, sinus); else ``other`` (snake activations, camera geometry), which does not
count.  A site reached from a class whose name says time (``SkyReelsV2Timesteps``
calling the 1-D sin-cos table function) is a ``timestep`` one for that class.  A
reached code object named ``*rotary*``/``*rope*`` that has no site is ``rope-applied``:
it applies rotary tables something else computed (often the pipeline).
"""
from __future__ import annotations

import dis
import functools
import importlib
import importlib.util
import inspect
import re
import types
from typing import Any, Iterator

TRIG = frozenset({"cos", "sin", "polar"})
ENTRIES = ("__init__", "forward", "__call__")
COUNTED = ("rope", "fourier", "timestep", "sincos", "rope-applied")

_ROPE = re.compile(r"rotary|rope|freqs_cis|inv_freq", re.IGNORECASE)
_FOURIER = re.compile(r"fourier", re.IGNORECASE)
_TIME = re.compile(r"time", re.IGNORECASE)
_SINCOS = re.compile(r"sincos|positional|pos_embed|sinus", re.IGNORECASE)
_IMPORT_NAME = dis.opmap["IMPORT_NAME"]

Sites = tuple[tuple[str, str], ...]   # (qualified name, kind), sorted
Edge = tuple[Any, types.FunctionType]  # (owner class or None, function)


def in_diffusers(obj: Any) -> bool:
    return (getattr(obj, "__module__", "") or "").startswith("diffusers.")


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def diffusers_function(obj: Any) -> types.FunctionType | None:
    """The plain diffusers function behind obj (a staticmethod, classmethod, bound method,
    property getter, functools.partial or decorated function), else None."""
    if isinstance(obj, property):
        obj = obj.fget
    if isinstance(obj, functools.partial):
        obj = obj.func
    obj = getattr(obj, "__func__", obj)
    try:
        obj = inspect.unwrap(obj)
    except ValueError:
        return None
    return obj if isinstance(obj, types.FunctionType) and in_diffusers(obj) else None


def site_kind(code: types.CodeType, qualname: str) -> str:
    """The kind of a code object that calls cos/sin/polar (module docstring)."""
    words = " ".join((qualname, *code.co_varnames))
    if "polar" in code.co_names or _ROPE.search(words):
        return "rope"
    if _FOURIER.search(words):
        return "fourier"
    if _TIME.search(words) or "t" in code.co_varnames:
        return "timestep"
    if _SINCOS.search(words):
        return "sincos"
    return "other"


def _imports(code: types.CodeType, package: str | None) -> dict[str, Any]:
    """The diffusers objects a code object imports inside itself (locals of the function,
    absent from its module's globals)."""
    if _IMPORT_NAME not in code.co_code[::2]:  # wordcode: opcodes at even offsets
        return {}
    out: dict[str, Any] = {}
    consts: list[Any] = [None, None]
    module = None
    for ins in dis.get_instructions(code):
        if ins.opname == "LOAD_CONST":
            consts = [consts[-1], ins.argval]
        elif ins.opname == "IMPORT_NAME":
            level = consts[0] if isinstance(consts[0], int) else 0
            try:
                name = importlib.util.resolve_name("." * level + ins.argval, package) \
                    if level else ins.argval
                module = importlib.import_module(name) if name.startswith("diffusers.") else None
            except (ImportError, ValueError):
                module = None
        elif ins.opname == "IMPORT_FROM" and module is not None:
            out[ins.argval] = getattr(module, ins.argval, None)
    return out


def _entries(cls: type) -> list[Edge]:
    out = []
    for klass in cls.__mro__:
        if in_diffusers(klass):
            for entry in ENTRIES:
                function = diffusers_function(vars(klass).get(entry))
                if function is not None:
                    out.append((cls, function))
    return out


@functools.lru_cache(maxsize=None)
def _read(owner: type | None, function: types.FunctionType, static: bool) -> tuple[Sites,
                                                                                  tuple[Edge, ...]]:
    """One function's own sites and the functions it leads to (cached: a function shared
    by many classes is read once)."""
    home = f"{function.__module__}.{function.__qualname__}"
    package = function.__globals__.get("__package__")
    sites: dict[str, str] = {}
    edges: list[Edge] = []

    def follow(target_owner: type | None, obj: Any) -> None:
        target = diffusers_function(obj)
        if target is not None:
            edges.append((target_owner, target))

    for code in _codes(function.__code__):
        names = code.co_names
        where = home if code is function.__code__ else f"{home}.{code.co_name}"
        if TRIG & set(names):
            sites[where] = site_kind(code, where)
        elif _ROPE.search(code.co_name):
            sites.setdefault(where, "rope-applied")
        named = [(name, function.__globals__.get(name)) for name in names]
        named += list(_imports(code, package).items())
        attrs = [a for a in names if not a.startswith("__")]
        for name, value in named:
            if static and isinstance(value, (dict, list, tuple)) and len(value) < 256:
                # a registry (FEATURE_FUNCTIONS[name]): what the static walk may reach through it
                for item in (value.values() if isinstance(value, dict) else value):
                    if inspect.isclass(item) and in_diffusers(item):
                        edges.extend(_entries(item))
                    else:
                        follow(None, item)
                continue
            if inspect.isclass(value) and in_diffusers(value):
                if static:
                    edges.extend(_entries(value))
                for attr in attrs:  # Cls.method(...) named in the same code
                    if attr in vars(value):
                        follow(value, vars(value)[attr])
            elif isinstance(value, types.ModuleType) and value.__name__.startswith("diffusers."):
                for attr in attrs:
                    follow(None, getattr(value, attr, None))
            else:
                follow(None, value)
            if owner is not None:  # self.method(...)
                for klass in owner.__mro__:
                    if name in vars(klass):
                        attr = vars(klass)[name]
                        if static:  # self._default_processor_cls(): a class kept as an attribute
                            held = attr if isinstance(attr, (list, tuple)) else [attr]
                            edges.extend(e for c in held if inspect.isclass(c) and in_diffusers(c)
                                         for e in _entries(c))
                        if in_diffusers(klass):
                            follow(owner, attr)
                        break
    return tuple(sorted(sites.items())), tuple(dict.fromkeys(edges))


def _closure(start: list[Edge], static: bool) -> dict[str, str]:
    seen: set = set()
    stack = list(start)
    sites: dict[str, str] = {}
    while stack:
        edge = stack.pop()
        if edge in seen:
            continue
        seen.add(edge)
        own, more = _read(edge[0], edge[1], static)
        sites.update(own)
        stack.extend(e for e in more if e not in seen)
    return sites


@functools.lru_cache(maxsize=None)
def class_sites(cls: type) -> Sites:
    """The sites reachable from one class's own code (the classes it constructs are not
    entered); sin-cos sites are timestep ones for a class whose name says time."""
    sites = _closure(_entries(cls), static=False)
    if _TIME.search(cls.__name__):
        sites = {k: ("timestep" if v == "sincos" else v) for k, v in sites.items()}
    return tuple(sorted(sites.items()))


@functools.lru_cache(maxsize=None)
def function_sites(function: types.FunctionType) -> Sites:
    return tuple(sorted(_closure([(None, function)], static=False).items()))


def static_sites(cls: type) -> dict[str, str]:
    """The sites reachable from a class alone, entering every class its code names and
    what the registries it names hold (an over-approximation: a class none of whose
    sites counts has no positional code in any instance)."""
    return _closure(_entries(cls), static=True)
