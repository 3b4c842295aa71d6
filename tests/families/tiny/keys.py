"""Config keys by meaning: the vocabulary every rule of the package is written in.

transformers names one quantity differently across families (``num_attention_heads``,
``n_head``, ``num_heads``; ``hidden_size``, ``d_model``, ``n_embd``, ...).  The shrink
rules, the repairs, the probe's special token ids and the rope check find the values
they need through these names and patterns, never through a family's name, so that a
new family is handled by the names it shares with the others.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import transformers

HEAD_KEYS = ("num_attention_heads", "num_heads", "n_head", "n_heads", "attention_heads",
             "encoder_attention_heads", "num_attention_head")
WIDTH_KEYS = ("hidden_size", "d_model", "n_embd", "embed_dim", "dim", "hidden_dim",
              "embedding_dim", "width")
LAYER_MAIN = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "depth",
              "encoder_layers", "decoder_layers", "num_blocks")
KV_RE = re.compile(r"^(num_key_value_heads|num_kv_heads|n_kv_heads|kv_n_heads|"
                   r"multi_query_group_num|num_key_value_attention_heads|num_query_groups)$")
STACK_RE = re.compile(r"(num_hidden_layers|_layers$|^n_layers?$|depth$|_depth$|^num_blocks$)")
SUBCOUNT_RE = re.compile(r"(first_k|dense_replace|num_dense|kv_shared|num_first|num_last|"
                         r"num_global_layers|shared_layers)")
FFN_RE = re.compile(r"(intermediate|ffn|mlp_dim|mlp_hidden|moe_inter|ff_dim|inner_dim|"
                    r"expert_dim|n_inner|expert_ffn|ffn_hidden|projector_hidden)")
EXPERT_RE = re.compile(r"^(num_experts|num_local_experts|n_routed_experts|moe_num_experts|"
                       r"num_routed_experts)$")
TOPK_RE = re.compile(r"^(num_experts_per_tok|num_experts_per_token|moe_k|moe_topk|moe_top_k|"
                     r"top_k|experts_per_token|top_k_experts)$")
GROUP_RE = re.compile(r"^(n_group|topk_group|num_expert_group)$")
VOCAB_RE = re.compile(r"(vocab_size|vocab$)")
TOKEN_RE = re.compile(r"(token_id|token_ids|token_index|_id|_ids|^im_start_id|^im_end_id)$")
NOT_TOKEN_RE = re.compile(r"(layer|block|head|expert|stage|group|source)")
INDEX_LIST_RE = re.compile(r"(layer|index|indexes|indices|idxs|_ids$|blocks)")
WIDTH_FOLLOW_RE = re.compile(r"(hidden|_dim$|^dim$|embed|d_model|width|_size$|channels|groups$)")
WIDTH_NOFOLLOW_RE = re.compile(r"(head_dim|vocab|intermediate|ffn|patch|image|kernel|window|"
                               r"position|max_|chunk|rank|codebook|mel|sampling|sample_rate|"
                               r"feature_size|lora|rope|nope|num_)")
MAMBA_HEADS_RE = re.compile(r"((mamba|ssm).*heads|n_mamba_heads)")
SECONDARY_HEADS_RE = re.compile(
    r"(^|_)(n_heads|num_heads|heads|attention_heads|key_heads|value_heads)$")
MAMBA_HD_RE = re.compile(r"(mamba|ssm).*(d_head|head_dim|headdim)")
# never dropped for re-derivation: what the rope check compares, and ids
PROTECT_RE = re.compile(r"(rope|rotary|partial|max_position|sliding|window|image_size|vocab|"
                        r"token|_id$|seed|head_dim|key_value|kv_heads|max_|num_classes)")
# fields every config has (PreTrainedConfig's own): never re-derived nor filled
BASE_FIELDS = {f.name for f in dataclasses.fields(transformers.PreTrainedConfig)} \
    if dataclasses.is_dataclass(transformers.PreTrainedConfig) else set()


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_subconfig(v: Any) -> bool:
    """A nested config inside a config dict (to_dict() keeps its model_type)."""
    return isinstance(v, dict) and "model_type" in v
