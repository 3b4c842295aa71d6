"""Config keys by meaning: the vocabulary the shrink rules, repairs and inputs are written in.

diffusers names one quantity many ways (``num_attention_heads``, ``n_heads``,
``num_heads``; ``hidden_size``, ``dim``, ``model_dim``; ``joint_attention_dim``,
``cross_attention_dim``, ``text_dim``, ``caption_channels``...), and a model's config is
the keyword arguments of its ``__init__``.  Every rule of the package finds what it
needs through these patterns on the *names* of those arguments, never through a
model's name, so a class added to diffusers is handled by the names it shares.
"""
from __future__ import annotations

import re
from typing import Any

# Positional configuration: rope widths, axes and thetas, per-head widths (a rope's width
# is a head width), timestep sinusoid widths and periods, patch sizes, the sample sizes
# sin-cos tables are made for, position limits, interpolation scales; an SDXL-style
# addition_time_embed_dim (a Timesteps width for size conditions) and the projection
# width made of it.  Never shrunk;
# build() reports any that a repair had to change (info["changed"]).
POSITIONAL_RE = re.compile(
    r"rope|rotary|theta|axes|mrope|head_dim|dim_head|dim_heads|^d_kv$|patch_size|max_period|"
    r"freq|flip_sin|downscale_freq|sample_size|sample_(height|width|frames)|pos_embed|"
    r"positional|position|max_(seq|text_seq|size|resolution|sequence)|interpolation|"
    r"time_proj|timestep_(channels|embed_dim|features_dim|scale|guidance)|time_step_dim|"
    r"fourier|base_(fps|height|width)|^t_scale$|time_factor|time_max|time_theta|"
    r"timestep_ratio|scale_factor|text_len|_len_t5|clip_length|num_train_timesteps|"
    r"num_embeds_ada_norm|^num_frames$|video_length|^scale$|sliding_window|nabla_window|"
    r"attention_w[HTW]$|addition_time_embed_dim|projection_class_embeddings_input_dim")

# the main head count of a config and the other head counts
HEAD_RE = re.compile(r"^(num_attention_heads|n_heads|num_heads|attention_heads)$")
OTHER_HEADS_RE = re.compile(r"(heads|_head)$")
KV_RE = re.compile(r"^(num_kv_heads|n_kv_heads|num_key_value_heads|"
                   r"num_key_value_attention_heads|\w+_num_key_value_heads)$")
# the per-head width that goes with a head count (kept: rope widths depend on it)
HEAD_DIM_RE = re.compile(r"(attention_head_dim|head_dim|dim_head|dim_heads|^d_kv$)$")
# the model's width when no per-head width is given (width // heads is the head width)
WIDTH_KEYS = ("hidden_size", "dim", "model_dim", "d_model", "embed_dim", "hidden_dim",
              "inner_dim", "width", "dit_dim")
# widths that may equal the model width and follow it when it changes
FOLLOW_RE = re.compile(r"(hidden_size|_dim$|^dim$|^dims?_|model_dim|embed_dim|d_model|"
                       r"width$|channels$|_size$)")

# stacks of layers or blocks (ints), and per-block lists of layer counts
LAYERS_RE = re.compile(r"(^|_)(layers|depth|blocks|layer|num_res_blocks|mid_block_layers)$|"
                       r"^(num_|n_)\w*(layers|blocks)$|layers_per_(block|down_block|up_block)$|"
                       r"^transformer_layers_per_\w+$|_layers_per_\w*block$")
# lists of layer indices into a stack (sorted ints), re-indexed when the stack shrinks
INDEX_LIST_RE = re.compile(r"(_layers|_ids|_places|_blocks|_indices|_layer_ids)$")
# the rope's axes: their widths add up to the rope's width, a head width
AXES_RE = re.compile(r"^(axes_dims?|axes_dims?_rope|rope_axes_dim|axes_dim_rope|rope_dim_list)$")
# per-block lists of channel widths (UNets, VAEs)
CHANNEL_LIST_RE = re.compile(r"(block_out_channels|_channels$|channel_sizes$|stage_channels$)")
# feed-forward widths
FFN_RE = re.compile(r"(ffn|ff_dim|ff_inner|intermediate|mlp_hidden|approximator_hidden|"
                    r"ffn_hidden|moe_inter|^d_ff$|hidden_dim$)")
# widths of text / condition inputs (encoder_hidden_states and friends)
TEXT_RE = re.compile(r"(text|caption|cross_attention_dim|cross_attention_input|joint_attention|"
                     r"pooled|context|cond_|encoder_hid_dim|cap_feat|clip_|image_embed|"
                     r"img_context|image_dim|image_proj|llm_|siglip|t5|hidden_states_channels|"
                     r"crossattn_proj|source_dim|target_dim|sound_dim|action_dim|"
                     r"global_states|global_cond|"
                     r"adaln_dim|adaln_lora|local_add|face_encoder_hidden|"
                     r"motion_encoder_dim|motion_style|motion_dim|in_text_dim|id_dim|vit_dim|"
                     r"output_dim)")
# the suffixes of text widths; experts, experts per token, vocabularies, token ids and
# norm groups
TEXT_SUFFIX_RE, EXPERTS_RE, TOPK_RE, VOCAB_RE, TOKEN_RE, NORM_GROUPS_RE = (
    re.compile(pattern) for pattern in (
        r"(dim|channels|size)", r"^(num_experts|num_routed_experts)$",
        r"^(num_activated_experts|top_k|num_experts_per_tok)$",
        r"(vocab_size|codebook_size|num_vq_embeddings|num_embeddings)$", r"token_id$",
        r"norm_num_groups$|^groups$"))


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_int_list(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and len(v) > 0 and all(is_int(x) for x in v)


def positional(key: str) -> bool:
    return bool(POSITIONAL_RE.search(key))
