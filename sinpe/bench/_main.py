"""``python -m sinpe.bench``'s command line: the arguments, the report's header, and
which rows each flag runs (see :mod:`sinpe.bench`)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence

import sinpe
from sinpe.bench._decode import decode_cases, print_decode
from sinpe.bench._device import device_cases, print_device
from sinpe.bench._diffusers import diffusers_cases, print_diffusers
from sinpe.bench._hot import ADD_SHAPES, hot_path_cases, print_hot_path
from sinpe.bench._long_context import long_context_cases, print_long_context
from sinpe.bench._machine import _header, _load_average, _print_cpu, _print_versions
from sinpe.bench._patch import patched_model_cases, print_patched
from sinpe.bench._pool import (add_pairs, alternation_cases, neighbour_cases,
                               print_alternation, print_neighbour, rope_pairs)
from sinpe.bench._rope import _print_rope, _rope_cases
from sinpe.bench._rotary import (first_call_cases, print_first_calls, print_rotary_module,
                                 rotary_module_cases)
from sinpe.bench._sections import _print_sections, _section_cases
from sinpe.bench._tables import (_add_case, _encode_case, _out_case, _print_table,
                                 _rope_out_case, _scale_case, _summarise, _torch_recipes)
from sinpe.bench._timing import blocks_in_turn
from sinpe.bench._variants import _print_variants, _variant_cases


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sinpe.bench",
        description="Time sinpe against numpy.full/fill, the NumPy float64 recipe and the "
                    "tutorials' PyTorch recipes.")
    parser.add_argument("--quick", action="store_true",
                        help="fewer rounds and no float64 NumPy recipe at the largest size")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")
    parser.add_argument("--threads", type=int, metavar="K",
                        help="sinpe threads (default: sinpe.get_num_threads())")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch recipes")
    # the modes, each timing something else than the tables
    for flag, text in (
        ("--hot-path", "time only the hot path (add_ of a training or decoding step, "
                       "on one thread and on all, against torch and NumPy)"),
        ("--variants", "time the variants (layouts, schedules, positions, RoPE, grids) "
                       "against the default table instead"),
        ("--rope", "time rotary embeddings (sinpe.torch.rope_) against an in-place "
                   "pass and HF's rotation instead, on 1 and all threads"),
        ("--compiled", "time a small Llama's forward under torch.compile instead, "
                       "HF's own and patched by sinpe.torch.patch"),
        ("--diffusers", "time diffusers' positional modules in a denoising loop instead "
                        "(Flux-like and Wan-like), their own and patched by sinpe.torch.patch"),
    ):
        parser.add_argument(flag, action="store_true", help=text)
    parser.add_argument("--device", metavar="DEVICE",
                        help="time sinpe.torch's device path on DEVICE (cuda, mps, cpu: the "
                             "device path forced on the CPU) instead: a Llama-shaped model's "
                             "decoding step, HF's own and patched (eager, compiled, CUDA "
                             "graphs), and the first call at 128k, 1M and 10M positions")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)

    threads_before = sinpe.get_num_threads()
    if args.threads is not None:
        sinpe.set_num_threads(args.threads)
    try:
        return _run(args)
    finally:
        sinpe.set_num_threads(threads_before)  # main() may be called in-process (sinpe bench)


def _run(args: argparse.Namespace) -> int:
    if args.device is not None:
        return _torch_mode(args, lambda: device_cases(args.device, args.quick, blocks_in_turn),
                           lambda found: print_device(found, args.device, sys.stdout),
                           f"  device {args.device}")
    if args.diffusers:
        return _torch_mode(args, lambda: {"cases": diffusers_cases(args.quick, blocks_in_turn)},
                           lambda found: print_diffusers(found["cases"], sys.stdout))
    if args.compiled:
        import torch

        load_before = _load_average()
        models = patched_model_cases(args.quick, blocks_in_turn, compiled=True)
        header = _header(args, load_before, str(torch.__version__), "1 and all")
        _print_versions(header, f"sinpe {header['sinpe']}  torch {header['torch']}",
                        sys.stdout)
        print_patched(models, sys.stdout, compiled=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"header": header, "models": models}, f, indent=2)
        return 0
    if args.rope:
        import torch

        load_before = _load_average()
        results = _rope_cases(args.quick, blocks_in_turn)
        shared = alternation_cases(args.quick, torch, rope_pairs(torch))
        steps = decode_cases(args.quick, torch, blocks_in_turn)
        sections = _section_cases(args.quick, blocks_in_turn)
        modules = rotary_module_cases(args.quick, blocks_in_turn)
        first_calls = first_call_cases()
        models = patched_model_cases(args.quick, blocks_in_turn)
        long_context = long_context_cases()
        header = _header(args, load_before, str(torch.__version__), "1 and all")
        _print_rope(results, header, sys.stdout)
        print_alternation(shared, "t.mul_(1.0)", sys.stdout)
        print_decode(steps, sys.stdout)
        _print_sections(sections, sys.stdout)
        print_rotary_module(modules, sys.stdout)
        print_first_calls(first_calls, sys.stdout)
        print_patched(models, sys.stdout)
        print_long_context(long_context, sys.stdout)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"header": header, "results": results, "alternated": shared,
                           "decoding_steps": steps, "sections": sections, "rotary_module": modules,
                           "first_calls": first_calls, "models": models,
                           "long_context": long_context}, f,
                          indent=2)
        return 0
    if args.variants:
        load_before = _load_average()
        results = _variant_cases(args.quick)
        header = _header(args, load_before, "-", "-")
        _print_variants(results, header, sys.stdout)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"header": header, "results": results}, f, indent=2)
        return 0
    torch_recipes = {} if args.no_torch else _torch_recipes()
    torch_version, torch_threads = "-", "-"
    if torch_recipes:
        import torch
        torch_version, torch_threads = str(torch.__version__), str(torch.get_num_threads())

    load_before = _load_average()
    torch_module: Any = None
    if torch_recipes:
        import torch
        torch_module = torch
    if args.hot_path:
        header = _header(args, load_before, torch_version, torch_threads)
        hot, shared, beside = _hot_path(args.quick, torch_module)
        _print_cpu(header, sys.stdout)
        _print_hot_path(hot, shared, beside)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"header": header, "hot_path": hot, "alternated": shared,
                           "neighbour": beside}, f, indent=2)
        return 0
    results = [
        _encode_case(16, 64, args.quick, True, torch_recipes),
        _encode_case(5000, 512, args.quick, True, torch_recipes),
        _encode_case(65536, 1024, args.quick, not args.quick, torch_recipes),
        _out_case(5000, 512, args.quick),
        _out_case(65536, 1024, args.quick),
        _rope_out_case(4096, 128, args.quick),
        _add_case((32, 512, 512), False, args.quick, bool(torch_recipes)),
        _add_case((8, 2048, 1024), False, args.quick, bool(torch_recipes)),
        _add_case((512, 32, 512), True, args.quick, bool(torch_recipes)),
        _add_case((2048, 8, 1024), True, args.quick, bool(torch_recipes)),
        _scale_case((32, 512, 512), args.quick),
        _scale_case((8, 2048, 1024), args.quick),
    ]
    for result in results:
        _summarise(result)
    hot, shared, beside = _hot_path(args.quick, torch_module)
    header = _header(args, load_before, torch_version, torch_threads)
    _print_table(results, header, sys.stdout)
    _print_hot_path(hot, shared, beside)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "results": results, "hot_path": hot,
                       "alternated": shared, "neighbour": beside}, f, indent=2)
    return 0


def _torch_mode(args: argparse.Namespace, measure: Callable[[], Dict[str, Any]],
                report: Callable[[Dict[str, Any]], None], note: str = "") -> int:
    """A mode of torch rows: measured, printed under the header, written as JSON."""
    import torch

    load_before = _load_average()
    found = measure()
    header = _header(args, load_before, str(torch.__version__), str(torch.get_num_threads()))
    _print_versions(header, f"sinpe {header['sinpe']}  torch {header['torch']}{note}",
                    sys.stdout)
    report(found)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, **found}, f, indent=2)
    return 0


def _hot_path(quick: bool, torch_module: Any) -> tuple[List[Dict[str, Any]], ...]:
    """The hot path alone (blocks in turn), alternated with torch's own op call by
    call (when torch is there), and beside a busy neighbour."""
    hot = hot_path_cases(quick, torch_module)
    shared = ([] if torch_module is None
              else alternation_cases(quick, torch_module, add_pairs(torch_module, ADD_SHAPES)))
    return hot, shared, neighbour_cases(quick, blocks_in_turn)


def _print_hot_path(hot: List[Dict[str, Any]], shared: List[Dict[str, Any]],
                    beside: List[Dict[str, Any]]) -> None:
    print_hot_path(hot, sys.stdout)
    if shared:
        print_alternation(shared, "y.add_(pe)", sys.stdout)
    print_neighbour(beside, sys.stdout)
