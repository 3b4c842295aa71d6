"""A Markdown table of every diffusers model class with positional code and its tiny build.

``python tests/diffusers/table_tiny.py`` prints, for each class ``dtiny.positional_classes``
finds (diffusers installed), the kinds of positional code its code calls (rope, timestep,
sincos, fourier; rope-applied: it applies rotary tables it is given), whether
``dtiny.build`` builds it, whether the forward ran on the synthesised inputs (and the
layout of the main input), the seconds of the build (configuration, instantiation, input
probe, derived check) and the error of the attempt that got furthest.  One process, one
class after the other (a minute or two on two cores).  ``--derived`` adds a column with the
positional settings that shrinking changed (info["derived"]).

With diffusers 0.42.1, 92 of the 101 classes run a forward.  The nine that do not, and why
(read from their code; no rule is keyed on these names):

- CosmosTransformer3DModel, CosmosControlNetModel: their forward calls torchvision
  (``transforms``), which is not installed here.
- Cosmos3OmniTransformer, MiniMaxH3Transformer3DModel, OmniGenTransformer2DModel,
  QwenImage21Transformer2DModel: a packed multimodal sequence whose index tables, tags and
  masks must agree with one another (text_indexes and vision index tables; token_tags,
  timestep_indices and per-modality indices; input_ids with image placeholders,
  input_image_sizes and packed position ids; an img_mask of VLM image slots, each standing
  for 2x2 latent tokens): what the pipeline's packer knows.
- RFD4ProteinaTransformer: the conditioning dict must hold the protein preprocessor's
  feature keys (is_in_context_conditioning and the feats_* features of the config).
- AutoencoderKLMiniMaxH3: encodes in chunks of clip_length (17) frames and drops token_drop
  latent frames per chunk, so a decode needs two chunks (34 frames): too slow for a probe.
- LTX2VideoDiffusionDecoderModel: its neighborhood attention needs 7x7 latents at the
  first stage (kernel (3, 7, 7)); at that size the 32x decoder takes more than 5 s on CPU.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path


def _cell(text: str, limit: int = 160) -> str:
    text = " ".join(str(text).split())
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    return text.replace("|", "\\|")


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import diffusers
    import dtiny

    derived = "--derived" in sys.argv[1:]
    start = time.perf_counter()
    names = dtiny.positional_classes()
    found = time.perf_counter() - start
    rows, built, ran = [], 0, 0
    for name in names:
        kinds = ", ".join(dtiny.positional_kinds(name)["kinds"])
        t0 = time.perf_counter()
        try:
            _, info = dtiny.build(name, compare=derived)
        except Exception as e:  # noqa: BLE001 - a row of its own
            seconds = time.perf_counter() - t0
            rows.append(f"| {name} | {kinds} | no | no | {seconds:.2f} | "
                        f"{_cell(f'{type(e).__name__}: {e}')} |" + (" |" if derived else ""))
            continue
        built += 1
        ran += info["forward_ok"]
        ok = f"yes ({info['layout']}, B={info['batch']})" if info["forward_ok"] else "no"
        row = (f"| {name} | {kinds} | yes | {ok} | {info['seconds']:.2f} | "
               f"{_cell(info['error'])} |")
        if derived:
            row += f" {_cell('; '.join(info['derived'] or []), 300)} |"
        rows.append(row)
    total = time.perf_counter() - start
    print(f"Tiny builds of the diffusers {diffusers.__version__} model classes with positional "
          f"code: {len(names)} found ({len(dtiny.model_classes())} model classes; "
          f"{found:.0f} s), {built} built, {ran} forwards ran; {total:.0f} s in all.\n")
    head = "| class | positional code | builds | forward ok | seconds | error |"
    rule = "|---|---|---|---|---|---|"
    if derived:
        head, rule = head + " derived changes |", rule + "---|"
    print(head)
    print(rule)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
