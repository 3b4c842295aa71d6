"""``python -m sinpe.bench --rope``'s multi-axis rows: ``rope_`` with three sections
(Qwen2-VL's time, height and width ids of text and an image; Qwen3-VL's interleaved
sections) against the single-axis ``rope_`` of the same tensor, at range positions
(``offset=``) and at explicit ones (``positions=``).  The timer is handed in
(:func:`sinpe.bench._timing.blocks_in_turn`; the tests stub it).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List

import sinpe
from sinpe.bench._timing import _format_time, print_rows


# multi-axis RoPE: (shape, dtype); a prefill of text around an image, and a decoding step
SECTION_CASES = [((1, 28, 2048, 128), "float32"), ((1, 28, 2048, 128), "bfloat16"),
                 ((1, 28, 1, 128), "float32")]


def _qwen2vl_ids(length: int, torch: Any) -> Any:
    """(3, 1, length) time, height and width ids as Qwen2-VL makes them: 64 text
    tokens, a 32 x 32 image (time fixed, height and width over the grid), text
    after it from the largest id + 1; one token alone: a decoding step at 2047."""
    if length == 1:
        return torch.full((3, 1, 1), 2047)
    t = torch.cat([torch.arange(64), torch.full((1024,), 64)])
    h = torch.cat([torch.arange(64), 64 + torch.arange(32).repeat_interleave(32)])
    w = torch.cat([torch.arange(64), 64 + torch.arange(32).repeat(32)])
    after = 96 + torch.arange(length - 1088)
    return torch.stack([torch.cat([a, after]) for a in (t, h, w)])[:, None, :]


def _section_cases(quick: bool, blocks_in_turn: Callable[..., Dict[str, float]]
                   ) -> List[Dict[str, Any]]:
    """rope_ with sections against the single-axis rope_ of the same tensor, blocks
    taken in turn, on one thread and all: offset= (range positions), positions=
    (explicit, the text ids: the same work per token as one section), three
    contiguous sections (16, 24, 24) and Qwen3-VL's interleaved (24, 20, 20)."""
    import torch

    import sinpe.torch as st

    results = []
    all_threads = sinpe.get_num_threads()
    try:
        for threads in sorted({1, all_threads}):
            sinpe.set_num_threads(threads)
            for shape, dtype_name in SECTION_CASES:
                t = torch.randn(shape).to(getattr(torch, dtype_name))
                length = shape[2]
                ids = _qwen2vl_ids(length, torch)[:, :, None, :]  # over the heads
                single = ids[0]
                offset = 2047 if length == 1 else 0
                rounds, seconds = (7, 1.0) if quick else (15, 4.0)
                times = blocks_in_turn({
                    "offset": lambda: st.rope_(t, offset=offset),
                    "positions": lambda: st.rope_(t, positions=single),
                    "sections": lambda: st.rope_(t, positions=ids, sections=(16, 24, 24)),
                    "interleaved": lambda: st.rope_(t, positions=ids, sections=(24, 20, 20),
                                                    sections_layout="interleaved"),
                }, rounds, seconds)
                results.append({"case": f"rope_ {tuple(shape)} {dtype_name}",
                                "threads": threads, "times": times})
    finally:
        sinpe.set_num_threads(all_threads)
    return results


def _print_sections(results: List[Dict[str, Any]], file: Any) -> None:
    print("\nmulti-axis RoPE: rope_ with three sections (Qwen2-VL's contiguous (16, 24, 24), "
          "Qwen3-VL's interleaved (24, 20, 20)) against the single-axis rope_ of the same "
          "tensor at offset= and at positions=; medians of blocks taken in turn", file=file)
    rows = [["case", "threads", "offset=", "positions=", "3 sections", "/positions", "/offset",
             "interleaved", "/positions", "/offset"]]
    for r in results:
        t = r["times"]
        rows.append([r["case"], str(r["threads"]), _format_time(t["offset"]),
                     _format_time(t["positions"]), _format_time(t["sections"]),
                     f"{t['sections'] / t['positions']:.2f}x",
                     f"{t['sections'] / t['offset']:.2f}x",
                     _format_time(t["interleaved"]),
                     f"{t['interleaved'] / t['positions']:.2f}x",
                     f"{t['interleaved'] / t['offset']:.2f}x"])
    print_rows(rows, file)
