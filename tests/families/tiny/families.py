"""The RoPE families of the installed transformers and the model classes to try for each.

Owns what counts as a family: a folder of ``transformers/models`` whose ``modeling_*.py``
mentions rotary embeddings (by source text, so a family added to transformers is found
without a list to update), and the order in which its model classes are tried: the auto
mappings first (causal LM, image-text-to-text, multimodal LM, seq2seq, speech seq2seq,
masked LM, base model), so that the class a user would load wins, then every other model
class the modeling modules export.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
from typing import Any

import transformers
from transformers.models.auto import configuration_auto as ca
from transformers.models.auto import modeling_auto as ma

ROOT = os.path.join(os.path.dirname(transformers.__file__), "models")
ROPE_PATTERN = re.compile(r"RotaryEmbedding|apply_rotary|rotary_emb|freqs_cis")

_MAPPING_ORDER = [
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES",
    "MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES",
    "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "MODEL_MAPPING_NAMES",
]
# order of the classes no auto mapping names (heads that produce tokens first)
_SUFFIX_ORDER = ["ForCausalLM", "ForConditionalGeneration", "ForMaskedLM", "Model"]


def _modeling_files(folder: str) -> list[str]:
    return [f for f in sorted(os.listdir(folder))
            if f.startswith("modeling_") and f.endswith(".py")]


@functools.lru_cache(maxsize=None)
def _rope_families() -> tuple[str, ...]:
    found = []
    for name in sorted(os.listdir(ROOT)):
        folder = os.path.join(ROOT, name)
        if not os.path.isdir(folder):
            continue
        for file in _modeling_files(folder):
            with open(os.path.join(folder, file)) as f:
                if ROPE_PATTERN.search(f.read()):
                    found.append(name)
                    break
    return tuple(found)


def rope_families() -> list[str]:
    """Model folders whose modeling_*.py defines rotary embeddings, sorted."""
    return list(_rope_families())


def model_types(family: str) -> list[str]:
    """Model types of a family folder, the folder's own type first."""
    types = [mt for mt in ca.CONFIG_MAPPING_NAMES if ca.model_type_to_module_name(mt) == family]
    types.sort(key=lambda mt: (mt.replace("-", "_") != family, len(mt)))
    return types


@functools.lru_cache(maxsize=None)
def _modeling_modules(family: str) -> tuple[Any, ...]:
    mods = []
    for file in _modeling_files(os.path.join(ROOT, family)):
        try:
            mods.append(importlib.import_module(f"transformers.models.{family}.{file[:-3]}"))
        except Exception:  # noqa: BLE001 - a module that needs an optional backend
            pass
    return tuple(mods)


def candidate_classes(family: str) -> list[Any]:
    """Model classes to try, in order: auto mappings (causal LM, image-text-to-text, seq2seq,
    masked LM, base), then every other PreTrainedModel class of the modeling module."""
    out: list[Any] = []
    types = model_types(family)
    for mapping in _MAPPING_ORDER:
        names = getattr(ma, mapping, {})
        for mt in types:
            value = names.get(mt)
            if value is None:
                continue
            for name in (value if isinstance(value, (list, tuple)) else [value]):
                cls = getattr(transformers, name, None)
                if cls is not None and cls not in out:
                    out.append(cls)
    extra = []
    for mod in _modeling_modules(family):
        for name in getattr(mod, "__all__", []):
            cls = getattr(mod, name, None)
            if (inspect.isclass(cls) and issubclass(cls, transformers.PreTrainedModel)
                    and getattr(cls, "config_class", None) is not None and cls not in out
                    and not name.endswith("PreTrainedModel")):
                extra.append(cls)

    def rank(cls: Any) -> int:
        for i, suffix in enumerate(_SUFFIX_ORDER):
            if cls.__name__.endswith(suffix):
                return i
        return len(_SUFFIX_ORDER)
    out += sorted(extra, key=rank)
    return out
