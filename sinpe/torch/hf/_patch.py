"""sinpe.torch.patch: sinpe's exact RoPE inside a loaded transformers model.

:func:`patch` makes a model's rotary embeddings exact (angles in double, rounded
once) and its apply function sinpe's kernel, and hands back a :class:`Patch` whose
``undo()`` restores everything.  It knows each family's apply form (FAMILIES) and
checks every swap on random inputs before it changes anything (the checks:
:mod:`sinpe.torch.hf._checks`; the forms: :mod:`sinpe.torch.hf._forms`): it is never
silently wrong, it refuses.  transformers is never imported here: its modules are
reached through the model's own classes.

What is swapped, and why there:
- The rotary module (``model.model.rotary_emb``, one per model): its ``forward`` is
  overridden on that instance by sinpe's :class:`sinpe.torch.RotaryEmbedding` of
  the same module (``RotaryEmbedding.from_module``), so the patch is per model:
  another model of the family in the process keeps HF's caches.  The module object
  stays (its buffers follow ``model.to``, ``state_dict`` and the module tree are
  unchanged, attributes other code reads are HF's), and ``undo`` deletes the
  override.
  GPT-J and CodeGen have no rotary module: each attention module keeps a table of
  sin and cos (``embed_positions``), replaced by sinpe's exact one.  A vision
  tower's axial rotary module (rope type "axial": ``model.model.visual.rotary_pos_emb``)
  gets :class:`sinpe.torch._multi_axis.AxialRotary`'s forward the same way.
- The apply function: transformers' attention calls the modeling module's global
  (``modeling_llama.apply_rotary_pos_emb``) at each forward; in transformers 5,
  ``use_kernelized_func`` only registers the function for the ``kernels`` package
  (without it, a no-op), and the hub-kernel mapping for ``rotary_pos_emb`` needs
  ``kernels`` and a download: neither works offline.  So the global is swapped, which
  every model of the family in the process then runs.  That is safe because the
  swap is verified to give the original's bits (and strides) for the same caches:
  an unpatched model's results do not change.  Swaps are counted per global; the
  last ``undo`` puts the original back (unless something else replaced it since).
"""

import sys
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch import nn

import sinpe
from sinpe.torch._multi_axis import AxialRotary
from sinpe.torch._rotary_module import RotaryEmbedding
from sinpe.torch._tensors import _round_once
from sinpe.torch.hf import _checks as checks
from sinpe.torch.hf import _forms as _hf_forms

# -- families ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Family:
    """How one modeling module of transformers applies RoPE: its apply globals and the
    sinpe form (sinpe.torch.hf._forms) that reproduces each, and where its caches come from:
    "module" (a ``*RotaryEmbedding`` module, whose forward sinpe's RotaryEmbedding
    replaces: it gives the caches' layout and dtype as the family's module does, e.g.
    OLMo's float32 and Cohere's pairwise ones) or "table" (GPT-J: each attention
    module's sin/cos table ``embed_positions``, replaced by sinpe's exact one)."""

    apply: dict[str, str]
    caches: str = "module"


_LLAMA = _Family({"apply_rotary_pos_emb": "llama"})
_VL = _Family({"apply_rotary_pos_emb": "llama", "apply_rotary_pos_emb_vision": "vision"})
FAMILIES: dict[str, _Family] = {
    "llama": _LLAMA, "mistral": _LLAMA, "qwen2": _LLAMA, "qwen3": _LLAMA, "gemma": _LLAMA,
    "gemma2": _LLAMA, "gemma3": _LLAMA, "phi": _LLAMA,
    "deepseek_v3": _Family({"apply_rotary_pos_emb": "llama",
                            "apply_rotary_pos_emb_interleave": "deepseek_interleave"}),
    "gpt_neox": _Family({"apply_rotary_pos_emb": "neox"}),
    "phi3": _Family({"apply_rotary_pos_emb": "neox"}),
    "olmo": _Family({"apply_rotary_pos_emb": "cast_back"}),
    "cohere": _Family({"apply_rotary_pos_emb": "cohere"}),
    "glm": _Family({"apply_rotary_pos_emb": "glm"}),
    "gptj": _Family({"apply_rotary_pos_emb": "gptj"}, "table"),
    "codegen": _Family({"apply_rotary_pos_emb": "gptj"}, "table"),
    # vision-language models: the text rotary module has multi-axis sections, the
    # vision tower axial 2-D rope (its own rotary module and apply function)
    "qwen2_vl": _VL, "qwen2_5_vl": _VL, "qwen3_vl": _VL, "qwen3_vl_moe": _VL,
}
_PREFIX = "transformers.models."


def _family_of(module_name: str) -> Optional[str]:
    """"llama" for transformers.models.llama.modeling_llama; None for anything else."""
    parts = module_name.split(".")
    if (module_name.startswith(_PREFIX) and len(parts) == 4
            and parts[3] == f"modeling_{parts[2]}"):
        return parts[2]
    return None


def _apply_globals(module: Any) -> list[str]:
    return sorted(name for name in vars(module) if name.startswith("apply_rotary_pos_emb")
                  and callable(vars(module)[name]))


# -- the handle ---------------------------------------------------------------------------


class _GlobalSwap:
    """One swap of a modeling module's apply global, shared by the patches that use it."""

    def __init__(self, module: Any, name: str, original: Any, replacement: Any) -> None:
        self.module, self.name = module, name
        self.original, self.replacement = original, replacement
        self.users = 0


_LOCK = threading.RLock()
_SWAPS: dict[tuple[str, str], _GlobalSwap] = {}  # (module, name) -> the swap in force
_PATCHED: "weakref.WeakKeyDictionary[nn.Module, Patch]" = weakref.WeakKeyDictionary()
_MISSING = object()


@dataclass
class _Undo:
    """What one patch changed, to put back in reverse order."""

    forwards: list[tuple[nn.Module, Any]] = field(default_factory=list)  # (module, old attr)
    tables: list[tuple[nn.Module, torch.Tensor]] = field(default_factory=list)
    swaps: list[_GlobalSwap] = field(default_factory=list)


class Patch:
    """What :func:`sinpe.torch.patch` changed in a model; ``undo()`` puts it back.

    Also a context manager: ``with sinpe.torch.patch(model): ...`` undoes on exit.
    ``families`` names the transformers families patched, ``functions`` the apply
    functions swapped (``module.name``), ``rotary`` the modules (by their name in
    the model) whose caches are now sinpe's.
    """

    def __init__(self, families: list[str], functions: list[str], rotary: list[str],
                 undo: _Undo) -> None:
        self.families = families
        self.functions = functions
        self.rotary = rotary
        self._undo: Optional[_Undo] = undo

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
            for module, old in reversed(undo.forwards):
                if old is _MISSING:
                    vars(module).pop("forward", None)
                else:
                    vars(module)["forward"] = old
                _PATCHED.pop(module, None)
            for module, table in reversed(undo.tables):
                now = _table_of(module)
                if now.device != table.device or now.dtype != table.dtype:  # model.to since
                    table = table.to(device=now.device, dtype=now.dtype)
                module.embed_positions = table
                _PATCHED.pop(module, None)
            for swap in reversed(undo.swaps):
                swap.users -= 1
                if swap.users == 0:
                    if getattr(swap.module, swap.name) is swap.replacement:
                        setattr(swap.module, swap.name, swap.original)
                    key = (swap.module.__name__, swap.name)
                    if _SWAPS.get(key) is swap:
                        del _SWAPS[key]

    def __enter__(self) -> "Patch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()

    def __repr__(self) -> str:
        state = "active" if self.active else "undone"
        return (f"<sinpe.torch.patch {state}: families {self.families}, functions "
                f"{self.functions}, rotary {self.rotary}>")


# -- patch --------------------------------------------------------------------------------


def patch(model: nn.Module, *, frequencies: str = "model") -> Patch:
    """Make a transformers model use sinpe's exact RoPE; return a handle to undo it.

    The model's rotary modules give sinpe's caches (angles in double, rounded once:
    :class:`sinpe.torch.RotaryEmbedding`, ``frequencies`` as there) and its family's
    apply function is sinpe's kernel with HF's bits.  Each family's apply form is
    known (``sinpe.torch.hf.FAMILIES``): the Llama formula, partial rotary
    inside (GPT-NeoX, Phi-3), interleaved pairs (Cohere, GLM), DeepSeek-V3's
    interleaved-in, half-split-out, GPT-J's ``(tensor, sin, cos)`` with its sin/cos
    table, results cast back to the input's dtype (OLMo).  Vision-language models
    (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE): the text rotary module with its
    multi-axis sections, and the vision tower's axial rotary module and
    ``apply_rotary_pos_emb_vision``.

    Before it changes anything, ``patch`` checks every swap on random inputs in the
    model's dtype and float32: each replacement apply function gives the original's
    result bit for bit (dtype and strides too) for the same caches, and the new caches
    are the old ones within the float32 rounding of HF's own angles.  It refuses, with
    a ``ValueError`` naming the family and the function, a family it does not know,
    a function it does not reproduce, a model without rotary embeddings, and a model
    (or module) already patched.  ``TypeError`` for a model that is not an
    ``nn.Module``.

    The rotary modules are patched per model; the apply functions are the modeling
    modules' globals, shared by every model of the family in the process (an
    unpatched one gets HF's bits from them: that is what the check verifies).

    >>> import torch, transformers, sinpe.torch
    >>> config = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
    ...                                   num_hidden_layers=1, num_attention_heads=2)
    >>> model = transformers.LlamaForCausalLM(config)
    >>> with sinpe.torch.patch(model) as handle:
    ...     handle.functions
    ['transformers.models.llama.modeling_llama.apply_rotary_pos_emb']
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (a transformers model), got "
                        f"{type(model).__name__}")
    if frequencies not in ("model", "exact"):
        raise ValueError(f'frequencies must be "model" or "exact", got {frequencies!r}')
    with _LOCK:
        plan = _plan(model, frequencies)
        plan.verify()
        return plan.apply()


@dataclass
class _Rotary:
    """A rotary module to patch: its name in the model, family, and new forward."""

    name: str
    module: nn.Module
    family: str
    forward: Callable[..., Any]


@dataclass
class _Table:
    """A GPT-J attention module to patch: its name, family, and new table."""

    name: str
    module: nn.Module
    family: str
    table: torch.Tensor


@dataclass
class _Plan:
    """Everything a patch will change, built and checked before any of it is."""

    rotary: list[_Rotary]
    tables: list[_Table]
    functions: list[tuple[str, Any, str, str]]  # (family, module, name, form)
    dtype: torch.dtype
    device: torch.device

    def verify(self) -> None:
        for item in self.rotary:
            checks.check_rotary(item.family, item.name, item.module, item.forward)
        for entry in self.tables:
            checks.check_table(entry.family, entry.name, _table_of(entry.module), entry.table)
        for family, module, name, form in self.functions:
            swap = _SWAPS.get((module.__name__, name))
            current = getattr(module, name)
            if swap is not None and current is swap.replacement:
                continue  # swapped and checked by an earlier patch
            checks.check_function(family, f"{module.__name__}.{name}", current,
                                  getattr(_hf_forms, form), form, self.dtype, self.device)

    def apply(self) -> Patch:
        undo = _Undo()
        handle = Patch(sorted({f for f, _, _, _ in self.functions}),
                       [f"{m.__name__}.{n}" for _, m, n, _ in self.functions],
                       [r.name for r in self.rotary] + [t.name for t in self.tables], undo)
        for item in self.rotary:
            undo.forwards.append((item.module, vars(item.module).get("forward", _MISSING)))
            vars(item.module)["forward"] = item.forward
            _PATCHED[item.module] = handle
        for entry in self.tables:
            undo.tables.append((entry.module, _table_of(entry.module)))
            entry.module.embed_positions = entry.table
            _PATCHED[entry.module] = handle
        for _, module, name, form in self.functions:
            key = (module.__name__, name)
            swap = _SWAPS.get(key)
            if swap is None or getattr(module, name) is not swap.replacement:
                swap = _GlobalSwap(module, name, getattr(module, name), getattr(_hf_forms, form))
                setattr(module, name, swap.replacement)
                _SWAPS[key] = swap
            swap.users += 1
            undo.swaps.append(swap)
        return handle


def _plan(model: nn.Module, frequencies: str) -> _Plan:
    """What to change in ``model``, or the ValueError that refuses it."""
    rotary, tables, unknown, used = [], [], set(), {}
    for name, module in model.named_modules():
        source = sys.modules.get(type(module).__module__)
        family = _family_of(type(module).__module__)
        if family is None or source is None:
            continue
        if family not in FAMILIES:
            if _apply_globals(source) or type(module).__name__.endswith("RotaryEmbedding"):
                unknown.add((family, type(module).__name__))
            continue
        kind = FAMILIES[family].caches
        if kind == "table" and isinstance(getattr(module, "embed_positions", None),
                                          torch.Tensor):
            _refuse_patched(module, name)
            tables.append(_Table(name, module, family, _exact_table(_table_of(module))))
            used[family] = source
        elif kind != "table" and type(module).__name__.endswith("RotaryEmbedding"):
            _refuse_patched(module, name)
            rotary.append(_Rotary(name, module, family, _sinpe_forward(module, frequencies)))
            used[family] = source
    if unknown:
        listed = ", ".join(f"{f} ({c})" for f, c in sorted(unknown))
        raise ValueError(
            f"sinpe.torch.patch does not know the rotary embeddings of the transformers "
            f"family {listed}; it knows {', '.join(sorted(FAMILIES))}. The model was not "
            "changed")
    if not rotary and not tables:
        raise ValueError(
            f"sinpe.torch.patch: {type(model).__name__} has no rotary position embedding of a "
            f"transformers family sinpe knows ({', '.join(sorted(FAMILIES))}); nothing to patch")
    functions = []
    for family, source in sorted(used.items()):
        for name, form in sorted(FAMILIES[family].apply.items()):
            if not callable(getattr(source, name, None)):
                raise ValueError(
                    f"sinpe.torch.patch: transformers' {family} family has no function "
                    f"{source.__name__}.{name} (another transformers version than sinpe "
                    "knows); the model was not changed")
            functions.append((family, source, name, form))
    parameter = next((p for p in model.parameters() if p.is_floating_point()), None)
    dtype = torch.float32 if parameter is None else parameter.dtype
    device = torch.device("cpu") if parameter is None else parameter.device
    return _Plan(rotary, tables, functions, dtype, device)


def _table_of(module: nn.Module) -> torch.Tensor:
    """A GPT-J attention module's sin/cos table (its ``embed_positions`` buffer)."""
    table = module.embed_positions
    assert isinstance(table, torch.Tensor)
    return table


def _refuse_patched(module: nn.Module, name: str) -> None:
    if module in _PATCHED:
        raise ValueError(
            f"sinpe.torch.patch: {name or type(module).__name__} is already patched "
            f"({_PATCHED[module]!r}); undo that patch first")


def _sinpe_forward(module: nn.Module, frequencies: str) -> Callable[..., Any]:
    """The forward that replaces ``module``'s: that of sinpe's rotary module made from it
    (:meth:`sinpe.torch.RotaryEmbedding.from_module`: its config, frequencies, attention
    factor, and the layout and dtype of the caches it returns, e.g. OLMo's float32 and
    Cohere's pairwise ones, and a vision-language text module's sections), or for a
    vision tower's axial module (rope type "axial")
    :class:`sinpe.torch._multi_axis.AxialRotary`."""
    if getattr(module, "rope_type", None) == "axial":
        return AxialRotary(module, frequencies)
    forward: Callable[..., Any] = RotaryEmbedding.from_module(
        module, frequencies=frequencies).forward
    return forward


def _exact_table(table: torch.Tensor) -> torch.Tensor:
    """GPT-J's ``embed_positions`` (``cat(sin, cos)`` of ``p * w`` for rows p, the
    frequencies ``w`` of its ``create_sinusoidal_positions``, float32) with the angles
    exact: in double, rounded once to the table's dtype."""
    rows, width = table.shape
    inv_freq = 1.0 / (10000 ** (torch.arange(0, width, 2, dtype=torch.int64) / width).float())
    cos, sin = sinpe.rope(rows, width, freq=inv_freq.double().numpy(), dtype=np.float64)
    half = width // 2
    values = torch.from_numpy(np.concatenate([sin[:, :half], cos[:, :half]], axis=1))
    return _round_once(values, table.dtype).to(table.device)
