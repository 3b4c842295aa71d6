"""Tiny random-init models of every transformers family that uses rotary embeddings.

    from tiny import build, rope_families
    model, config, info = build("llama")          # float32, eval mode, seeded
    model(**info["inputs"])                       # a forward that runs

``rope_families()`` lists the model folders of the installed transformers whose modeling
code defines rotary embeddings; ``build(family, seed=0, length=SEQ)`` shrinks the
family's default config by generic rules (no per-family values: ``SHRINK_RULES``,
``FILL_RULES``), builds the first model class that runs, and finds its inputs
(``info["kind"]``, ``info["position_ids"]``, ``info["forward_ok"]``); ``info["rope_check"]``
lists any rope-relevant value that differs from the default config (empty when the rope
is the family's own).  ``build``'s docstring lists every key of ``info``.

The package is split by idea: ``families`` (which families, which classes), ``keys``
(config keys by meaning), ``shrink`` (the config rules), ``repair`` (fill-ins for
defaults transformers cannot use), ``inputs`` (a forward that runs), ``check`` (the rope
values kept) and ``search`` (``build``: the search over classes, variants and repairs).
"""
from .check import rope_diff
from .families import candidate_classes, rope_families
from .inputs import BIG_OFFSET, PROBE_BUDGET, SEQ
from .repair import FILL_RULES, SLIDING_FILL
from .search import VARIANTS, build
from .shrink import EXPERTS, FFN, HEADS, LAYERS, SHRINK_RULES, SUB_LAYERS, TOPK, VOCAB

__all__ = [
    "BIG_OFFSET", "EXPERTS", "FFN", "FILL_RULES", "HEADS", "LAYERS", "PROBE_BUDGET", "SEQ",
    "SHRINK_RULES", "SLIDING_FILL", "SUB_LAYERS", "TOPK", "VARIANTS", "VOCAB", "build",
    "candidate_classes", "rope_diff", "rope_families",
]
