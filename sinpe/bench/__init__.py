"""Side-by-side timings: sinpe against the memory floor, NumPy and PyTorch.

Run ``python -m sinpe.bench`` (``--quick`` for a short run, ``--json PATH``
to save the figures).  One row per case:

* ``encode`` of a new float32 table vs ``numpy.full`` of the same shape
  (allocating and writing the same bytes is the floor), the NumPy float64
  recipe (``sinpe.reference.table_float64``) and each tutorial's
  PyTorch recipe (when torch is installed);
* ``encode(out=)`` and ``rope(out=)`` vs ``ndarray.fill`` of the same bytes;
* ``add_`` vs ``numpy.add(x, pe, out=x)`` and torch's ``x.add_(pe)`` with
  ``pe`` already computed, and ``add_(x, scale=sqrt(d))`` vs ``add_(x)``;
* the hot path (``--hot-path`` for it alone): ``add_`` and ``sinpe.torch.add_``
  on the shapes training and decoding loops use, one thread and all, against
  torch and NumPy, and the compute-bound tables on all threads against one
  (sinpe/bench/_hot.py).

The first line names the CPU and the SIMD level sinpe's loops run at (and
torch's, ``torch.backends.cpu.get_cpu_capability()``, where torch is loaded;
``ATEN_CPU_CAPABILITY=avx2`` or ``default`` holds torch to a lower level as
``SINPE_SIMD`` holds sinpe): the ratios differ between CPUs and levels.

``--variants`` times the variants instead (layouts, schedules, explicit
frequencies and positions, RoPE caches, grids), each against the default
table that writes the same number of bytes: the promise is that a variant
costs what the core table costs.

``--rope`` times rotary embeddings instead (needs torch): ``sinpe.torch.rope_``
on query-shaped tensors against the in-place pass over the same tensor
(``t.mul_(1.0)``, timed in alternation), ``exact=True``, and HF's
``apply_rotary_pos_emb`` with HF's ``rotary_emb`` (``LlamaRotaryEmbedding``,
when transformers is installed), on one thread and then on all threads
(sinpe's and torch's alike); then multi-axis RoPE: ``rope_`` with three
sections (Qwen2-VL's time, height and width ids of text and an image;
Qwen3-VL's interleaved sections) against the single-axis ``rope_`` of the same
tensor, at range positions (``offset=``) and at explicit ones
(``positions=``); then ``sinpe.torch.RotaryEmbedding`` against
transformers' ``LlamaRotaryEmbedding``, forward alone, for a decoding step and a
2048-token prefill (sinpe/bench/_rotary.py); and a small Llama's forward (a
prefill and a decoding step) unpatched and under ``sinpe.torch.patch``
(sinpe/bench/_patch.py).

``--compiled`` times that small Llama's forward under ``torch.compile(fullgraph=True)``
instead, HF's own and patched (sinpe's caches by one custom op, HF's rotation
expression fused by inductor), on one thread and on all.

Every figure is a median over repeated rounds.  sinpe and its floor take
turns round by round (a change of machine load hits both alike); the slower
NumPy and torch recipes are timed after them, apart, so that torch's
spinning OpenMP threads cannot steal sinpe's cores.  All ratios are between
medians measured in this one process.
"""
from sinpe.bench._main import main

__all__ = ["main"]
