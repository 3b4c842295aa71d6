"""The handle of sinpe.torch.patch and the plan it applies: what every library shares.

An adapter (:mod:`sinpe.torch.hf` for transformers, :mod:`sinpe.torch.diffusers`)
finds where a model keeps its positional code and checks each swap; it returns a
:class:`Plan`, everything the patch will change, built and checked before any of it
is.  :meth:`Plan.apply` makes the changes and returns the :class:`Patch` handle, which
says what was swapped and what stays the library's own, and whose ``undo()`` restores
everything.

What is swapped, and how:
- A module's method (a rotary module's ``forward``, GPT-J's table accessor, a timestep
  embedding's ``forward``) is overridden on that instance by sinpe's, so the patch is
  per model.  The module object, its buffers, ``state_dict`` and the module tree stay
  as they are; ``undo`` deletes the override.  A deep copy or a pickle of a patched
  model carries no patch: the override copies as the module's own method.
- A table kept in a module's buffer (GPT-J's sin/cos table) is replaced by sinpe's
  exact one in the buffer's dtype; ``undo`` puts the library's back (in the buffer's
  dtype and device then).
- A function is a module's global that the library's code calls at each forward
  (``modeling_llama.apply_rotary_pos_emb``).  So the global is swapped, which every model
  of the family in the process then runs: safe, because a swap gives the original's
  result for the same arguments (the checks hold it to that), so an unpatched model's
  results do not change.  Swaps are counted per global; the last ``undo`` puts the
  original back (unless something else replaced it since).
"""

import copy
import threading
import types
import warnings
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
from torch import nn

from sinpe.torch._tensors import _one_torch_thread, _round_once
from sinpe.torch.patching import _checks as checks
from sinpe.torch.patching import _discover as discover

NOT_CHANGED = "the model was not changed"
class NothingFound(ValueError):
    """A model in which an adapter finds no positional code (a pipeline passes such a
    component over)."""


# a MethodSwap's kind for a patched object's own method that only scopes swaps
# (:mod:`._scoped`): not a stand-in, so not listed as one
ENTRY = "entry"


# -- overrides of one instance's method -----------------------------------------------------


class _Override:
    """A method of one module instance replaced by sinpe's (kept in the instance's
    ``__dict__``, where it takes precedence over the class's method), or a callable
    object the instance holds (``original``: a positional helper that is no module)
    replaced by a callable that forwards every other attribute to it.

    A deep copy or a pickle of the module (of the model) gets the class's own method
    (or a copy of the original object) back in its place: copies carry no patch.
    (Copying the override as it is would give the copy sinpe's caches with no handle
    that could undo them.)"""

    def __init__(self, module: Any, name: str, call: Callable[..., Any],
                 original: Any = None) -> None:
        self.module = weakref.ref(module)
        self.name = name
        self.call = call
        self.original = original

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.call(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        original = self.__dict__.get("original")
        if original is None:
            raise AttributeError(name)
        return getattr(original, name)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        if self.original is not None:
            return copy.deepcopy(self.original, memo)
        module = self.module()
        copied = memo.get(id(module)) if module is not None else None
        if copied is None:  # copied alone, not as part of its module
            copied = copy.deepcopy(module, memo)
        return _own_method(copied, self.name)

    def __reduce__(self) -> tuple[Any, ...]:
        if self.original is not None:
            return (_itself, (self.original,))
        return (_own_method, (self.module(), self.name))


def _itself(value: Any) -> Any:
    return value


def _own_method(module: Any, name: str) -> Any:
    """``module``'s own (its class's) method ``name``, bound to it."""
    return types.MethodType(getattr(type(module), name), module)


_MISSING = object()


@dataclass
class MethodSwap:
    """One override to make: what it replaces, the call that stands for it, and how
    that call gets its values (the handle's ``caches``: "rotary module", "double
    precision", ...)."""

    what: str  # the module's name in the model
    module: nn.Module
    name: str  # the method: "forward" or a table's accessor (or a callable attribute)
    call: Callable[..., Any]
    kind: str = "rotary module"
    original: Any = None  # the callable object an attribute swap replaces


@dataclass
class TableSwap:
    """A sin/cos table kept in a module's buffer, and sinpe's exact values for it."""

    what: str  # module.buffer in the model
    module: nn.Module
    buffer: str
    exact: torch.Tensor  # float64, on the CPU


_MARK = "_sinpe_hf_"  # (the name deep copies and pickles of earlier patches carry)


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


LOCK = threading.RLock()
SWAPS: dict[str, _GlobalSwap] = {}  # qualname -> the swap in force
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
        The families (a library's model folders: transformers' ``llama``, diffusers'
        ``flux``) whose positional code was swapped.
    rotary : list of str
        The modules (by their name in the model) whose caches are now sinpe's: rotary
        modules, attention modules whose sin/cos table sinpe's exact one replaces, and a
        diffusers model's positional modules and helpers (timestep embeddings, rotary
        modules of every form, modules holding sin-cos tables).
    caches : dict of str to str
        How each of them gets sinpe's caches: ``"rotary module"`` (a
        :class:`sinpe.torch.RotaryEmbedding` made from it: kept tables), ``"double
        precision"`` (its own code, every float32 value computed in float64: modules whose
        caches sinpe's rotary module does not make), ``"table"`` (sinpe's exact sin/cos
        table in the buffer), ``"exact, kept"`` (its own code with its angles formed in
        double, outputs rounded once and kept per grid: diffusers' modules), ``"angles
        and their errors"`` (its own code and outputs, each with the rounding error of its
        float32 arithmetic kept for the patched code it is given to: a diffusers module
        that returns angles for attention processors to take the cosine of).
    functions : list of str
        The functions swapped (``module.name``): apply functions, for sinpe's kernel with
        the library's bits; a diffusers model's or pipeline's positional functions, exact
        inside the patched object's own calls.
    forms : dict of str to str
        Each swapped function's form (:data:`sinpe.torch.patching.FORMS`, or ``"exact,
        kept"``).
    kept : dict of str to str
        What was found and stays the library's own, with the reason: an apply function
        no form of sinpe reproduces bit for bit, a rotary module sinpe cannot stand in
        for, a stand-in whose first-call check failed.  The model's other parts are
        patched all the same.
    checked_at_first_call : list of str
        Stand-ins checked against the module's (or function's) own at their first call,
        because sinpe cannot call them on inputs of its own: rotary modules whose forward
        takes other arguments than positions (a vision tower's image size, an audio
        encoder's lengths), and every diffusers stand-in.  If a check fails, the module
        gives its own values from then on, ``kept`` says why, and a ``RuntimeWarning`` is
        issued.
    double_precision : list of str
        (a property) The modules computing in float64 on the model's device.
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
        with LOCK:
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
                    if SWAPS.get(swap.place.qualname) is swap:
                        del SWAPS[swap.place.qualname]

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


# -- the plan -------------------------------------------------------------------------------


def model_place(model: nn.Module) -> torch.device:
    """The device the model computes on: its first floating parameter's (the CPU for a
    model of none); ValueError for a model on the meta device."""
    tensors = [*model.parameters(), *model.buffers()]
    if any(t.device.type == "meta" for t in tensors):
        raise ValueError(f"sinpe.torch.patch: {type(model).__name__} is on the meta device "
                         "(no values to check sinpe's caches and functions against); load "
                         f"its weights first; {NOT_CHANGED}")
    floating = next((t for t in tensors if t.is_floating_point()), None)
    return torch.device("cpu") if floating is None else floating.device


def refuse_patched(module: nn.Module, name: str) -> None:
    """ValueError if ``module`` is patched already (by a patch not undone)."""
    if module in _PATCHED:
        raise ValueError(
            f"sinpe.torch.patch: {name or type(module).__name__} is already patched "
            f"({_PATCHED[module]!r}); undo that patch first")


@dataclass
class Plan:
    """Everything a patch will change, built and checked before any of it is.

    ``deferred``: calls checked at their first call (``(what, call)``: the call has an
    ``on_failure`` attribute that :meth:`apply` sets to report a failed check)."""

    methods: list[MethodSwap] = field(default_factory=list)
    tables: list[TableSwap] = field(default_factory=list)
    functions: list[tuple[discover.Global, Any, Callable[..., Any], str]] = field(
        default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    families: set[str] = field(default_factory=set)
    deferred: list[tuple[str, Any]] = field(default_factory=list)

    def extend(self, other: "Plan") -> None:
        """Adds ``other``'s changes (a pipeline's components, one plan)."""
        self.methods += other.methods
        self.tables += other.tables
        self.functions += [f for f in other.functions
                           if f[0].qualname not in {g[0].qualname for g in self.functions}]
        self.kept.update(other.kept)
        self.families |= other.families
        self.deferred += other.deferred

    def add_tables(self, model: nn.Module) -> int:
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
            refuse_patched(module, name)
            self.tables.append(TableSwap(f"{name}.{buffer}", module, buffer, exact))
            self.families.add(discover.family_of(type(module).__module__))
        return found

    def add_function(self, place: discover.Global, device: torch.device) -> None:
        """Plans the swap of an apply function for the first form that gives its
        results (:func:`sinpe.torch.patching._checks.recognise_function`), or keeps
        it, with the reason."""
        current = getattr(place.module, place.name)
        swap = SWAPS.get(place.qualname)
        if swap is not None and current is swap.replacement:
            self.functions.append((place, swap.original, swap.replacement, swap.form))
            return  # swapped and checked by an earlier patch
        recognised = checks.recognise_function(current, device)
        if recognised.form is None or recognised.replacement is None:
            self.kept[place.qualname] = recognised.reason
            return
        self.functions.append((place, current, recognised.replacement, recognised.form.name))

    def apply(self, library: str = "the library") -> Patch:
        """Makes the changes; the handle that undoes them.  ``library``: whose own
        values a call that fails its first-call check gives from then on (a warning's
        words)."""
        undo = _Undo()
        families = sorted(self.families | {place.family for place, *_ in self.functions})
        stand_ins = [m for m in self.methods if m.kind != ENTRY]
        handle = Patch(families, [m.what for m in stand_ins] + [t.what for t in self.tables],
                       {place.qualname: form for place, _, _, form in self.functions},
                       dict(self.kept), undo)
        for what, call in self.deferred:
            call.on_failure = _reporter(handle, what, library)
        handle.checked_at_first_call = [m.what for m in stand_ins
                                        if any(m.call is d for _, d in self.deferred)] + [
            p.qualname for p, _, replacement, _ in self.functions
            if any(getattr(replacement, "call", None) is d for _, d in self.deferred)]
        handle.caches = {m.what: m.kind for m in stand_ins}
        handle.caches.update({t.what: "table" for t in self.tables})
        for item in self.methods:
            override = _Override(item.module, item.name, item.call, item.original)
            undo.methods.append((item.module, item.name,
                                 vars(item.module).get(item.name, _MISSING), override))
            vars(item.module)[item.name] = override
            _PATCHED[item.module] = handle
        for entry in self.tables:
            own = entry.module._buffers[entry.buffer]
            assert own is not None
            mark = _TableMark(entry.module._buffers, entry.buffer, own)
            undo.tables.append((entry.module, entry.buffer, mark))
            entry.module._buffers[entry.buffer] = _round_once(entry.exact, own.dtype).to(
                own.device)
            vars(entry.module)[_MARK + entry.buffer] = mark
            _PATCHED[entry.module] = handle
        for place, original, replacement, form in self.functions:
            swap = SWAPS.get(place.qualname)
            if swap is None or getattr(place.module, place.name) is not swap.replacement:
                swap = _GlobalSwap(place, original, replacement, form)
                setattr(place.module, place.name, replacement)
                SWAPS[place.qualname] = swap
            swap.users += 1
            undo.swaps.append(swap)
        return handle


def made(plan: Callable[[], Plan], library: str) -> Patch:
    """The plan ``plan()`` makes, applied: under the lock of every patch, the checks on
    one torch thread (their small calls run faster so beside busy neighbours)."""
    with LOCK:
        with _one_torch_thread():
            changes = plan()
        return changes.apply(library)


def _reporter(handle: Patch, what: str, library: str) -> Callable[[str], None]:
    """What a call checked at its first call does if that check fails: it gives the
    library's own values from then on, the handle lists it, and a warning says so."""
    def report(why: str) -> None:
        handle.kept[what] = why
        warnings.warn(f"sinpe.torch.patch: {what} {why}; it gives {library}' own values",
                      RuntimeWarning, stacklevel=3)
    return report
