"""``python -m sinpe.bench --variants``: each variant (layouts, schedules, explicit
frequencies and positions, RoPE caches, grids) against the default table that writes
the same number of bytes, timed in turn: a variant must cost what the core table costs.
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

import sinpe
from sinpe.bench._machine import _print_versions
from sinpe.bench._timing import _format_time, _measure, _settle, print_rows


def _variant_cases(quick: bool) -> List[Dict[str, Any]]:
    """Each variant timed in alternation with the default call that writes as
    many bytes (a RoPE pair of (L, d) caches against encode(L, 2 d))."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 512, 512), dtype=np.float32)
    packed = np.concatenate([np.arange(n) for n in rng.integers(1, 300, 100)])[:5000]
    packed = np.pad(packed, (0, 5000 - packed.size))
    per_token = np.tile(np.arange(512), (32, 1))
    left_pad = per_token - 7
    padding = left_pad < 0
    freq = 1.0 / 10000 ** (np.arange(256) / 256)
    cases: List[Any] = [
        # small calls: the default spelled with the same keyword, since CPython's
        # keyword parsing alone costs ~0.3 us, more than the variant's own work
        ("encode(16, 64) concatenated vs layout='interleaved'",
         lambda: sinpe.encode(16, 64, layout="concatenated"),
         lambda: sinpe.encode(16, 64, layout="interleaved")),
        ("encode(16, 64) fairseq vs schedule='paper'",
         lambda: sinpe.encode(16, 64, schedule="fairseq"),
         lambda: sinpe.encode(16, 64, schedule="paper")),
        ("encode(5000, 512) concatenated",
         lambda: sinpe.encode(5000, 512, layout="concatenated"), lambda: sinpe.encode(5000, 512)),
        ("encode(5000, 512) fairseq, concatenated",
         lambda: sinpe.encode(5000, 512, schedule="fairseq", layout="concatenated"),
         lambda: sinpe.encode(5000, 512)),
        ("encode(5000, 512, freq=...)", lambda: sinpe.encode(5000, 512, freq=freq),
         lambda: sinpe.encode(5000, 512)),
        ("encode(65536, 1024) concatenated",
         lambda: sinpe.encode(65536, 1024, layout="concatenated"),
         lambda: sinpe.encode(65536, 1024)),
        ("encode_at(packed positions (5000,), 512)", lambda: sinpe.encode_at(packed, 512),
         lambda: sinpe.encode(5000, 512)),
        ("rope(4096, 128) half-split vs encode(4096, 256)", lambda: sinpe.rope(4096, 128),
         lambda: sinpe.encode(4096, 256)),
        ("rope(4096, 128) pairs vs encode(4096, 256)",
         lambda: sinpe.rope(4096, 128, layout="interleaved"), lambda: sinpe.encode(4096, 256)),
        ("rope(65536, 128) half-split vs encode(65536, 256)", lambda: sinpe.rope(65536, 128),
         lambda: sinpe.encode(65536, 256)),
        ("encode_grid((64, 64), 512) vs encode(4096, 512)",
         lambda: sinpe.encode_grid((64, 64), 512), lambda: sinpe.encode(4096, 512)),
        ("encode_grid((8, 32, 32), 768) vs encode(8192, 768)",
         lambda: sinpe.encode_grid((8, 32, 32), 768), lambda: sinpe.encode(8192, 768)),
        ("add_ (32, 512, 512) concatenated", lambda: sinpe.add_(x, layout="concatenated"),
         lambda: sinpe.add_(x)),
        ("add_ (32, 512, 512) positions=(32, 512)",
         lambda: sinpe.add_(x, positions=per_token), lambda: sinpe.add_(x)),
        ("add_ (32, 512, 512) left padding",
         lambda: sinpe.add_(x, positions=left_pad, padding=padding), lambda: sinpe.add_(x)),
    ]
    results = []
    for label, variant, default in cases:
        small = "(16, 64)" in label
        rounds, budget, inner = ((30, 1.0, 2000) if small else
                                 (15, 3.0, 1) if quick else (41, 10.0, 1))
        _settle()
        times = _measure({"variant": variant, "default": default}, rounds, budget, inner)
        results.append({"case": label, "times": times,
                        "variant_over_default": times["variant"] / times["default"]})
    return results


def _print_variants(results: List[Dict[str, Any]], header: Dict[str, Any], file: Any) -> None:
    _print_versions(header, f"sinpe {header['sinpe']} threads={header['sinpe_threads']}  "
                            f"numpy {header['numpy']}", file)
    print("medians, timed in alternation; ratio = variant / default table of the same bytes",
          file=file)
    rows = [["case", "variant", "default", "ratio"]]
    for r in results:
        t = r["times"]
        rows.append([r["case"], _format_time(t["variant"]), _format_time(t["default"]),
                     f"{r['variant_over_default']:.2f}x"])
    print_rows(rows, file)
