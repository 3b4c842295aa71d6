"""sinpe.torch.patch: sinpe's exact RoPE inside a loaded transformers model.

:func:`patch` finds where a model keeps its RoPE (:mod:`._discover`: its rotary
modules, the apply functions its attention calls, sin/cos tables kept in attention
modules), decides by what each does which sinpe can stand in for (:mod:`._checks`),
and swaps those; a :class:`Patch` handle says what was swapped and what stays
transformers' own, and ``undo()`` restores everything.  It is never silently wrong:
each swap is verified on random inputs first, and a model none of whose caches sinpe
can make is refused.  transformers is never imported here: its code is reached
through the model's own classes.

What is swapped, and how:
- A rotary module's ``forward`` (and GPT-J's table accessor) is overridden on that
  instance by sinpe's (:class:`sinpe.torch.RotaryEmbedding` made from the module, or
  :class:`sinpe.torch._multi_axis.AxialRotary` for a vision tower's axial one), so the
  patch is per model.  The module object, its buffers, ``state_dict`` and the module
  tree stay as they are; ``undo`` deletes the override.  A deep copy or a pickle of a
  patched model carries no patch: the override copies as the module's own method.
- An apply function is the modeling module's global that attention calls at each
  forward (``modeling_llama.apply_rotary_pos_emb``; transformers 5's kernel hub needs
  the ``kernels`` package and a download).  So the global is swapped, which every model
  of the family in the process then runs: safe, because the swap gives the original's
  bits (and strides) for the same caches, so an unpatched model's results do not
  change.  Swaps are counted per global; the last ``undo`` puts the original back
  (unless something else replaced it since).
"""

import copy
import threading
import warnings
import types
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import nn

import sinpe
from sinpe.torch._multi_axis import AxialRotary
from sinpe.torch._rotary_module import RotaryEmbedding
from sinpe.torch._tensors import _float64_on, _one_torch_thread, _round_once
from sinpe.torch.hf import _checks as checks
from sinpe.torch.hf import _discover as discover
from sinpe.torch.hf._double import DoubleForward

_NOT_CHANGED = "the model was not changed"
_FREQUENCIES = ("model", "exact")


# -- overrides of one instance's method -----------------------------------------------------


class _Override:
    """A method of one module instance replaced by sinpe's (kept in the instance's
    ``__dict__``, where it takes precedence over the class's method).

    A deep copy or a pickle of the module (of the model) gets the class's own method
    back in its place: copies carry no patch.  (Copying the override as it is would
    give the copy sinpe's caches with no handle that could undo them.)"""

    def __init__(self, module: nn.Module, name: str, call: Callable[..., Any]) -> None:
        self.module = weakref.ref(module)
        self.name = name
        self.call = call

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        module = self.module()
        copied = memo.get(id(module)) if module is not None else None
        if copied is None:  # copied alone, not as part of its module
            copied = copy.deepcopy(module, memo)
        return _own_method(copied, self.name)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_own_method, (self.module(), self.name))


def _own_method(module: Any, name: str) -> Any:
    """``module``'s own (its class's) method ``name``, bound to it."""
    return types.MethodType(getattr(type(module), name), module)


_MISSING = object()


@dataclass
class _MethodSwap:
    """One override to make: what it replaces and why it stands for it."""

    what: str  # the module's name in the model
    module: nn.Module
    name: str  # the method: "forward" or a table's accessor
    call: Callable[..., Any]


@dataclass
class _TableSwap:
    """A sin/cos table kept in a module's buffer, and sinpe's exact values for it."""

    what: str  # module.buffer in the model
    module: nn.Module
    buffer: str
    exact: torch.Tensor  # float64, on the CPU


_MARK = "_sinpe_hf_"


class _TableMark:
    """Kept in a patched module's ``__dict__`` beside the table sinpe replaced: HF's own
    table, which a deep copy or a pickle of the module gets back (copies carry no patch),
    and which ``undo`` restores."""

    def __init__(self, buffers: dict[str, Any], name: str, table: torch.Tensor) -> None:
        self.buffers, self.name, self.table = buffers, name, table

    def table_like(self, now: Optional[torch.Tensor]) -> torch.Tensor:
        """HF's table in the buffer's current dtype and device (``model.to`` since)."""
        if now is None or (now.dtype == self.table.dtype and now.device == self.table.device):
            return self.table
        return self.table.to(device=now.device, dtype=now.dtype)

    def __deepcopy__(self, memo: dict[int, Any]) -> None:
        buffers = memo.get(id(self.buffers))  # the copy's buffers, copied before this
        if buffers is not None:
            buffers[self.name] = copy.deepcopy(self.table_like(buffers.get(self.name)), memo)
        return None

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore_table, (self.buffers, self.name, self.table))


def _restore_table(buffers: dict[str, Any], name: str, table: torch.Tensor) -> None:
    """A pickled patched module's buffers get HF's table back (and its mark becomes None)."""
    buffers[name] = table


# -- swaps of modeling modules' globals -----------------------------------------------------


class _GlobalSwap:
    """One swap of a modeling module's apply global, shared by the patches that use it."""

    def __init__(self, place: discover.Global, original: Any, replacement: Any,
                 form: str) -> None:
        self.place, self.original, self.replacement, self.form = (
            place, original, replacement, form)
        self.users = 0


_LOCK = threading.RLock()
_SWAPS: dict[str, _GlobalSwap] = {}  # qualname -> the swap in force
_PATCHED: "weakref.WeakKeyDictionary[nn.Module, Patch]" = weakref.WeakKeyDictionary()


@dataclass
class _Undo:
    """What one patch changed, to put back in reverse order."""

    methods: list[tuple[nn.Module, str, Any, _Override]] = field(default_factory=list)
    tables: list[tuple[nn.Module, str, "_TableMark"]] = field(default_factory=list)
    swaps: list[_GlobalSwap] = field(default_factory=list)


class Patch:
    """What :func:`sinpe.torch.patch` changed in a model; ``undo()`` puts it back.

    Also a context manager: ``with sinpe.torch.patch(model): ...`` undoes on exit.

    Attributes
    ----------
    families : list of str
        The transformers families (model folders) whose RoPE was swapped.
    rotary : list of str
        The modules (by their name in the model) whose caches are now sinpe's: rotary
        modules, and attention modules whose sin/cos table sinpe's exact one replaces.
    caches : dict of str to str
        How each of them gets sinpe's caches: ``"rotary module"`` (a
        :class:`sinpe.torch.RotaryEmbedding` made from it: kept tables), ``"double
        precision"`` (its own code, every float32 value computed in float64: modules whose
        caches sinpe's rotary module does not make), ``"table"`` (sinpe's exact sin/cos
        table in the buffer).
    functions : list of str
        The apply functions swapped for sinpe's kernel (``module.name``).
    forms : dict of str to str
        Each swapped function's form (:data:`sinpe.torch.hf.FORMS`).
    kept : dict of str to str
        What was found and stays transformers' own, with the reason: an apply function
        no form of sinpe reproduces bit for bit, a rotary module sinpe cannot stand in
        for.  The model's other parts are patched all the same.
    checked_at_first_call : list of str
        Rotary modules (among ``rotary``) whose forward takes other arguments than
        positions (a vision tower's image size, an audio encoder's lengths): sinpe runs
        their own code in double precision, and checks it against the module's own at
        their first call (if they differ, the module gives its own caches from then on,
        ``kept`` says why, and a ``RuntimeWarning`` is issued).
    """

    def __init__(self, families: list[str], rotary: list[str], forms: dict[str, str],
                 kept: dict[str, str], undo: _Undo) -> None:
        self.families = families
        self.rotary = rotary
        self.functions = list(forms)
        self.forms = forms
        self.kept = kept
        self.caches: dict[str, str] = {}
        self.checked_at_first_call: list[str] = []
        self._undo: Optional[_Undo] = undo

    @property
    def double_precision(self) -> list[str]:
        """The modules (among ``rotary``) that compute their caches in float64 on the
        model's device: their own code in double precision (``caches``' "double
        precision"), the one place where sinpe computes in float64 there.  On a
        device without float64 (Apple's MPS) ``patch`` keeps these modules
        transformers' own instead, and ``kept`` says why."""
        return [what for what, how in self.caches.items() if how == "double precision"]

    @property
    def active(self) -> bool:
        """Whether the patch is in force (not undone)."""
        return self._undo is not None

    def undo(self) -> None:
        """Restore the model as it was: HF's caches and apply functions, bit for bit.
        A second call does nothing."""
        with _LOCK:
            if self._undo is None:
                return
            undo, self._undo = self._undo, None
            for module, name, old, override in reversed(undo.methods):
                if vars(module).get(name) is override:
                    if old is _MISSING:
                        del vars(module)[name]
                    else:
                        vars(module)[name] = old
                _PATCHED.pop(module, None)
            for module, buffer, mark in reversed(undo.tables):
                now = module._buffers[buffer]
                module._buffers[buffer] = mark.table_like(now)
                vars(module).pop(_MARK + buffer, None)
                _PATCHED.pop(module, None)
            for swap in reversed(undo.swaps):
                swap.users -= 1
                if swap.users == 0:
                    if getattr(swap.place.module, swap.place.name) is swap.replacement:
                        setattr(swap.place.module, swap.place.name, swap.original)
                    if _SWAPS.get(swap.place.qualname) is swap:
                        del _SWAPS[swap.place.qualname]

    def __enter__(self) -> "Patch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()

    def __repr__(self) -> str:
        state = "active" if self.active else "undone"
        kept = f", kept {sorted(self.kept)}" if self.kept else ""
        return (f"<sinpe.torch.patch {state}: families {self.families}, rotary "
                f"{self.rotary}, functions {self.functions}{kept}>")


# -- patch ----------------------------------------------------------------------------------


def patch(model: nn.Module, *, frequencies: str = "model") -> Patch:
    """Make a transformers model use sinpe's exact RoPE; return a handle to undo it.

    ``patch`` finds the model's rotary modules, the apply functions its attention
    calls, and sin/cos tables kept in attention modules, with no list of families:
    each is recognised by what it does.  The rotary modules then give sinpe's caches
    (angles in double, rounded once: :class:`sinpe.torch.RotaryEmbedding` made from
    each, ``frequencies`` as there; a vision tower's axial module likewise), tables
    are sinpe's exact ones, and each apply function that one of sinpe's forms
    reproduces (:data:`sinpe.torch.hf.FORMS`) runs sinpe's kernel with HF's bits.

    Before it changes anything, ``patch`` checks every swap on random inputs in the
    model's dtype and float32: a replacement apply function gives the original's
    result bit for bit (dtype and strides too) on every input of many shapes the
    original takes, and the new caches are the old ones within the float32 rounding of
    HF's own angles.  What fails its check stays transformers' own and is listed in
    the handle's ``kept``; the model's caches must be sinpe's for the patch to be
    made.  ``ValueError`` (the model unchanged) for a model without rotary
    embeddings, one none of whose caches sinpe can make (naming the family, the module
    and what differed), a model on the ``meta`` device, and a model (or module)
    already patched; ``TypeError`` for a model that is not an ``nn.Module``.

    The rotary modules are patched per model (a deep copy or pickle of a patched model
    is an unpatched one); the apply functions are the modeling modules' globals,
    shared by every model of the family in the process (an unpatched one gets HF's
    bits from them: that is what the check verifies).

    >>> import torch, transformers, sinpe.torch
    >>> config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
    ...                                   num_hidden_layers=1, num_attention_heads=2)
    >>> model = transformers.LlamaForCausalLM(config)
    >>> with sinpe.torch.patch(model) as handle:
    ...     handle.functions, handle.rotary
    (['transformers.models.llama.modeling_llama.apply_rotary_pos_emb'], ['model.rotary_emb'])
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (a transformers model), got "
                        f"{type(model).__name__}")
    if frequencies not in _FREQUENCIES:
        raise ValueError(f'frequencies must be "model" or "exact", got {frequencies!r}')
    with _LOCK:
        with _one_torch_thread():
            plan = _Plan.of(model, frequencies)
        return plan.apply()


def _model_place(model: nn.Module) -> torch.device:
    """The device the model computes on: its first floating parameter's."""
    tensors = [*model.parameters(), *model.buffers()]
    if any(t.device.type == "meta" for t in tensors):
        raise ValueError(f"sinpe.torch.patch: {type(model).__name__} is on the meta device "
                         "(no values to check sinpe's caches and functions against); load "
                         f"its weights first; {_NOT_CHANGED}")
    floating = next((t for t in tensors if t.is_floating_point()), None)
    return torch.device("cpu") if floating is None else floating.device


@dataclass
class _Plan:
    """Everything a patch will change, built and checked before any of it is."""

    methods: list[_MethodSwap]
    tables: list["_TableSwap"]
    functions: list[tuple[discover.Global, Any, Callable[..., Any], str]]
    kept: dict[str, str]
    families: set[str]
    deferred: list[tuple[str, DoubleForward]]

    @classmethod
    def of(cls, model: nn.Module, frequencies: str) -> "_Plan":
        device = _model_place(model)
        plan = cls([], [], [], {}, set(), [])
        caches_found = plan._rotary_modules(model, frequencies, device)
        caches_found += plan._tables(model)
        globals_found = discover.apply_globals(model, _SWAPS)
        if not caches_found and not globals_found:
            raise ValueError(f"sinpe.torch.patch: {type(model).__name__} has no rotary "
                             "position embedding that sinpe finds (no rotary module, sin/cos "
                             f"table or apply function); {_NOT_CHANGED}")
        if not plan.methods and not plan.tables:
            reasons = "; ".join(f"{what} {why}" for what, why in plan.kept.items()) or (
                "its attention calls "
                + ", ".join(place.qualname for place in globals_found)
                + ", but no rotary module or sin/cos table of the model makes their caches "
                "(they are made inside attention, or this configuration does not use RoPE)")
            family = _families_of(model)
            raise ValueError(f"sinpe.torch.patch refuses the {family} family: {reasons}; "
                             f"{_NOT_CHANGED}")
        for place in globals_found:
            plan._function(place, device)
        return plan

    def _rotary_modules(self, model: nn.Module, frequencies: str, device: torch.device) -> int:
        """Plans a forward override for each rotary module sinpe stands in for (its
        device path's tables made on the model's ``device``); returns how many rotary
        modules were found."""
        found = 0
        made: dict[Any, Callable[..., Any]] = {}  # one stand-in for modules alike
        for name, module in discover.rotary_modules(model):
            found += 1
            _refuse_patched(module, name)
            what = f"the rotary module {name or 'model'} ({type(module).__name__})"
            key = _stand_in_key(module)
            forward = made.get(key) if key is not None else None
            if forward is None:
                forward, why = _stand_in(module, what, frequencies, self.deferred, device)
                if forward is None:
                    self.kept[what] = why
                    continue
                _prepare(forward, device)
                if key is not None:
                    made[key] = forward
            self.methods.append(_MethodSwap(name, module, "forward", forward))
            self.families.add(discover.family_of(type(module).__module__))
        return found

    def _tables(self, model: nn.Module) -> int:
        """Plans sinpe's exact table for each sin/cos table the model keeps; returns how
        many were found."""
        found = 0
        for name, module, buffer in discover.tables(model):
            table = module._buffers[buffer]
            assert table is not None
            exact = checks.sinusoid_table(table)
            if exact is None:
                continue  # a buffer of another kind
            found += 1
            _refuse_patched(module, name)
            self.tables.append(_TableSwap(f"{name}.{buffer}", module, buffer, exact))
            self.families.add(discover.family_of(type(module).__module__))
        return found

    def _function(self, place: discover.Global, device: torch.device) -> None:
        current = getattr(place.module, place.name)
        swap = _SWAPS.get(place.qualname)
        if swap is not None and current is swap.replacement:
            self.functions.append((place, swap.original, swap.replacement, swap.form))
            return  # swapped and checked by an earlier patch
        recognised = checks.recognise_function(current, device)
        if recognised.form is None or recognised.replacement is None:
            self.kept[place.qualname] = recognised.reason
            return
        self.functions.append((place, current, recognised.replacement, recognised.form.name))

    def apply(self) -> Patch:
        undo = _Undo()
        families = sorted(self.families | {place.family for place, *_ in self.functions})
        handle = Patch(families, [m.what for m in self.methods] + [t.what for t in self.tables],
                       {place.qualname: form for place, _, _, form in self.functions},
                       dict(self.kept), undo)
        for what, double in self.deferred:
            double.on_failure = _reporter(handle, what)
        handle.checked_at_first_call = [m.what for m in self.methods
                                        if any(m.call is d for _, d in self.deferred)]
        handle.caches = {m.what: "double precision" if isinstance(m.call, DoubleForward)
                         else "rotary module" for m in self.methods}
        handle.caches.update({t.what: "table" for t in self.tables})
        for item in self.methods:
            override = _Override(item.module, item.name, item.call)
            undo.methods.append((item.module, item.name,
                                 vars(item.module).get(item.name, _MISSING), override))
            vars(item.module)[item.name] = override
            _PATCHED[item.module] = handle
        for entry in self.tables:
            hf_table = entry.module._buffers[entry.buffer]
            assert hf_table is not None
            mark = _TableMark(entry.module._buffers, entry.buffer, hf_table)
            undo.tables.append((entry.module, entry.buffer, mark))
            entry.module._buffers[entry.buffer] = _round_once(entry.exact, hf_table.dtype).to(
                hf_table.device)
            vars(entry.module)[_MARK + entry.buffer] = mark
            _PATCHED[entry.module] = handle
        for place, original, replacement, form in self.functions:
            swap = _SWAPS.get(place.qualname)
            if swap is None or getattr(place.module, place.name) is not swap.replacement:
                swap = _GlobalSwap(place, original, replacement, form)
                setattr(place.module, place.name, replacement)
                _SWAPS[place.qualname] = swap
            swap.users += 1
            undo.swaps.append(swap)
        return handle


def _reporter(handle: "Patch", what: str) -> Callable[[str], None]:
    """What a rotary module checked at its first call does if that check fails: the
    module gives its own caches from then on, the handle lists it, and a warning says so."""
    def report(why: str) -> None:
        handle.kept[what] = why
        warnings.warn(f"sinpe.torch.patch: {what} {why}; it gives transformers' own caches",
                      RuntimeWarning, stacklevel=3)
    return report


def _families_of(model: nn.Module) -> str:
    names = sorted({discover.family_of(type(m).__module__) for m in model.modules()
                    if (type(m).__module__ or "").startswith("transformers.models.")})
    return ", ".join(names) or type(model).__name__


def _refuse_patched(module: nn.Module, name: str) -> None:
    if module in _PATCHED:
        raise ValueError(
            f"sinpe.torch.patch: {name or type(module).__name__} is already patched "
            f"({_PATCHED[module]!r}); undo that patch first")


def _stand_in_key(module: nn.Module) -> Optional[tuple[Any, ...]]:
    """Modules whose stand-in can be shared (one table for all): the same class and the
    same config object, no state of their own beyond it."""
    config = getattr(module, "config", None)
    if config is None:
        return None
    return (type(module), id(config), getattr(module, "layer_type", None),
            getattr(module, "rope_type", None) == "axial")


def _prepare(forward: Callable[..., Any], device: torch.device) -> None:
    """Makes a stand-in's device-path tables on the model's device now (a compiled
    first call could not make them)."""
    owner = getattr(forward, "__self__", forward)
    prepare = getattr(owner, "prepare", None)
    if callable(prepare):
        prepare(device)


def _stand_in(module: nn.Module, what: str, frequencies: str,
              deferred: list[tuple[str, DoubleForward]], device: torch.device
              ) -> tuple[Optional[Callable[..., Any]], str]:
    """sinpe's forward for a rotary module, checked, or None and why not: sinpe's
    rotary module made from it (kept tables) where it stands in, else the module's own
    forward in double precision (:mod:`._double`), checked now on positions of the
    checks' own for a text rotary module, at its first call for any other."""
    try:
        forward = _sinpe_forward(module, frequencies)
        # sinpe's rotary module checked itself against a new module of the family when
        # it was made: only the module as the model holds it is left to check
        why = checks.check_rotary(module, forward, fresh=isinstance(forward, AxialRotary))
    except (TypeError, ValueError) as exc:
        why = f"is not one sinpe's rotary module stands in for ({exc})"
    if not why:
        return forward, ""
    if frequencies == "exact":
        return None, why  # the double run keeps the module's own frequencies
    if not _float64_on(device):
        return None, (f"{why}; sinpe's other way, its own code in double precision, needs "
                      f"float64, which {device.type} does not have")
    if discover.takes_positions(module):
        double = DoubleForward(module, checked=True)
        again = checks.check_double(module, double.run)
        return (double, "") if not again else (None, f"{why}; in double precision it {again}")
    double = DoubleForward(module, checked=False)
    deferred.append((what, double))
    return double, ""


def _sinpe_forward(module: nn.Module, frequencies: str) -> Callable[..., Any]:
    """The forward that replaces ``module``'s: that of sinpe's rotary module made from it
    (:meth:`sinpe.torch.RotaryEmbedding.from_module`: its config, frequencies, attention
    factor, and the form of the caches it returns), or for a vision tower's axial
    module (rope type "axial") :class:`sinpe.torch._multi_axis.AxialRotary`."""
    if getattr(module, "rope_type", None) == "axial":
        return AxialRotary(module, frequencies)
    forward: Callable[..., Any] = RotaryEmbedding.from_module(
        module, frequencies=frequencies).forward
    return forward
