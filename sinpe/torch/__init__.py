"""PyTorch drop-in: the ``PositionalEncoding`` module of the tutorials, filled by sinpe.

``import sinpe`` never imports torch; this module does, and needs it installed
(the tests pin ``torch==2.13.0``; the README says how to get the CPU-only build).

- :class:`PositionalEncoding` replaces the classes of The Annotated Transformer
  (batch-first, buffer ``pe`` of shape ``(1, max_len, d_model)``) and of
  pytorch/examples ``word_language_model`` (seq-first, ``(max_len, 1, d_model)``):
  their ``state_dict`` loads with ``strict=True``.  It works with
  ``torch.jit.script``, ``torch.jit.trace``, ``torch.compile``, ``torch.export``
  and ONNX export, and builds under a default-device context (``meta`` too).
- :func:`encode` returns the table as a tensor on any device.
- :func:`add_` adds the table to a tensor in place, on any device.
- :func:`rope_` applies rotary position embeddings (RoPE) to queries or keys in
  place (inference), :func:`rope` out of place and differentiable (training),
  and :func:`apply_rotary_pos_emb` is HF's function of that name, bit for bit,
  without its temporaries, to patch into a model.
- :func:`rope_cache` makes RoPE's ``(cos, sin)`` caches as tensors, and
  :class:`RotaryEmbedding` stands in for a transformers model's rotary module
  (every rope type and every form of caches transformers' modules return, the
  model's frequencies, exact angles, tables sized by the positions asked for; the
  multi-axis sections of vision-language text models), and
  :func:`apply_rotary_pos_emb_vision` is the vision towers' apply function of
  Qwen2-VL, Qwen2.5-VL and Qwen3-VL, bit for bit.
- :func:`patch` makes a loaded transformers model use both (its rotary modules
  and its family's apply function), checked before it changes anything, undoable.

Tables are computed in double precision by sinpe's C kernel on the CPU and
rounded once to the tensor's dtype (float16, bfloat16, float32 or float64),
written straight into the tensor's own memory.  Every invalid call raises
``TypeError``, ``ValueError``, ``OverflowError`` or ``MemoryError`` before
anything is written.
"""

# This module hands the names on, and shares torch's threads at import.  The modules
# under it import one way, each only those listed before it: _tensors (what the kernel
# sees of a tensor: dtypes and their codes, views of its memory, allocation), _verify
# (how far transformers' caches may be from sinpe's: shared with hf/), _tables
# (encode, add_, PositionalEncoding), _rope (rope_, rope), _apply (HF's apply functions),
# _caches (rope_cache), _multi_axis (vision-language models' sections and axial rope),
# _rotary_family (a config's transformers rotary module: found, called, checked against),
# _rotary_tables (one layer type's frequencies, switches and kept tables, every form),
# _rotary_module (RotaryEmbedding); above them patching/ (what patch shares between
# libraries), hf/ (the transformers adapter, drift) and _patch (sinpe.torch.patch).
# None of them imports this module's names.

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "sinpe.torch needs PyTorch, which is not installed: "
        "pip install torch==2.13.0 (sinpe itself works without it)"
    ) from exc

from sinpe._openmp import share_torch_threads
from sinpe.torch._apply import apply_rotary_pos_emb, apply_rotary_pos_emb_vision
from sinpe.torch._caches import rope_cache
from sinpe.torch._rope import rope, rope_
from sinpe.torch._rotary_module import RotaryEmbedding
from sinpe.torch._tables import PositionalEncoding, add_, encode
from sinpe.torch._patch import patch
from sinpe.torch.hf import drift

# Large calls run on torch's own OpenMP threads from now on (sinpe/_openmp.py).
share_torch_threads(torch)

__all__ = ["PositionalEncoding", "RotaryEmbedding", "add_", "apply_rotary_pos_emb",
           "apply_rotary_pos_emb_vision", "drift", "encode", "patch", "rope", "rope_", "rope_cache"]
