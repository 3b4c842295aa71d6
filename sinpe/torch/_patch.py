"""``sinpe.torch.patch``: the adapter of the model's library makes the plan, the shared
machinery applies it (:mod:`sinpe.torch.patching`).

One adapter per library, each a package beside this module: :mod:`sinpe.torch.diffusers`
(diffusers models and pipelines), :mod:`sinpe.torch.hf` (transformers models, and any
other ``nn.Module``).  :data:`ADAPTERS` is the one list of them, first claim first.  A
pipeline is its components (each planned by the adapter that claims it) and its own
code, under one handle.
"""

from typing import Any

from torch import nn

from sinpe.torch.diffusers import _adapter as diffusers
from sinpe.torch.hf import _adapter as hf
from sinpe.torch.patching._handle import NOT_CHANGED, NothingFound, Patch, Plan, made

FREQUENCIES = ("model", "exact")
# the libraries' adapters, in the order they are asked whether a model is theirs
ADAPTERS = (diffusers, hf)


def patch(model: Any, *, frequencies: str = "model") -> Patch:
    """Make a transformers model use sinpe's exact RoPE; return a handle to undo it.

    ``patch`` finds the model's rotary modules, the apply functions its attention
    calls, and sin/cos tables kept in attention modules, with no list of families:
    each is recognised by what it does.  The rotary modules then give sinpe's caches
    (angles in double, rounded once: :class:`sinpe.torch.RotaryEmbedding` made from
    each, ``frequencies`` as there; a vision tower's axial module likewise), tables
    are sinpe's exact ones, and each apply function that one of sinpe's forms
    reproduces (:data:`sinpe.torch.patching.FORMS`) runs sinpe's kernel with HF's bits.

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
    components = getattr(model, "components", None)
    pipeline = not isinstance(model, nn.Module) and isinstance(components, dict)
    if not isinstance(model, nn.Module) and not pipeline:
        raise TypeError(f"model must be a torch.nn.Module (a transformers or diffusers "
                        f"model) or a diffusers pipeline, got {type(model).__name__}")
    if frequencies not in FREQUENCIES:
        raise ValueError(f'frequencies must be "model" or "exact", got {frequencies!r}')
    if pipeline:
        return made(lambda: _pipeline_plan(model, components, frequencies), "the library")
    adapter = next(a for a in ADAPTERS if a.claims(model))
    return adapter.patch_model(model, frequencies)


def _pipeline_plan(pipeline: Any, components: dict[str, Any], frequencies: str) -> Plan:
    """One plan for a pipeline: each component with positional code (by its adapter), and
    the positional functions the pipeline's own code calls."""
    changes = Plan()
    for name, component in components.items():
        if not isinstance(component, nn.Module):
            continue
        adapter = next(a for a in ADAPTERS if a.claims(component))
        try:
            changes.extend(adapter.plan(component, frequencies))
        except NothingFound:
            continue  # a component without positional code (a VAE, a text encoder)
    changes.extend(diffusers.plan(pipeline, "model"))
    if not changes.methods and not changes.functions and not changes.tables:
        raise ValueError(f"sinpe.torch.patch: {type(pipeline).__name__} has no component or "
                         f"code with positional code that sinpe finds; {NOT_CHANGED}")
    return changes
