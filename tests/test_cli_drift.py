"""``sinpe drift PATH``: a saved tiny model directory and a config.json, offline.

The command's numbers are sinpe.torch.drift's on the same model (loaded again here
from the same directory); a config.json builds random weights from the seed and
says so; ``--json`` parses; ``-o`` writes a PNG; progress goes to stderr; bad paths
and offsets exit 2 with the reason, before any work.
"""
from __future__ import annotations

import json

import pytest
from conftest import require, require_torch

torch = require_torch()
transformers = require("transformers")
require("matplotlib")
import sinpe.torch as st  # noqa: E402
from sinpe.cli import main  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ARGS = ["--positions", "1024", "131072", "--tokens", "12"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny Llama saved by save_pretrained, and its config.json alone."""
    root = tmp_path_factory.mktemp("drift")
    config = transformers.LlamaConfig(
        vocab_size=80, hidden_size=64, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, max_position_embeddings=512, tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(root / "model")
    config.save_pretrained(root / "config")
    return root


def test_a_model_directory_gives_drifts_numbers(saved, capsys):
    assert main(["drift", str(saved / "model"), *ARGS, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    model = transformers.AutoModelForCausalLM.from_pretrained(saved / "model",
                                                              local_files_only=True)
    want = st.drift(model, positions=[1024, 131072], tokens=12, seed=0)
    assert {k: out[k] for k in want} == want
    assert out["random_weights"] is False and out["dtype"] == "float32"
    assert out["model"] == "LlamaForCausalLM" and out["max_position_embeddings"] == 512


def test_the_table_says_what_it_measured(saved, capsys):
    assert main(["drift", str(saved / "model"), *ARGS]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].startswith("sinpe drift: LlamaForCausalLM from ")
    rows = [line.split() for line in lines if line.split()[:1] in (["1024"], ["131072"])]
    assert len(rows) == 2 and all(len(row) == 9 for row in rows)
    assert "max_position_embeddings (512)" in captured.out  # the offsets lie past it
    assert "random weights" not in captured.out
    assert "[1/6] patched by sinpe: positions 0..11" in captured.err
    assert "[6/6] as loaded (hf): positions 131072..131083" in captured.err


def test_a_config_json_builds_random_weights_and_says_so(saved, capsys):
    path = str(saved / "config" / "config.json")
    assert main(["drift", path, *ARGS, "--seed", "3"]) == 0
    assert "random weights (built from" in capsys.readouterr().out
    assert main(["drift", path, *ARGS, "--seed", "3", "--json", "--dtype", "bfloat16"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["random_weights"] is True and out["dtype"] == "bfloat16" and out["seed"] == 3
    assert max(out["cache_sinpe"]) <= 2.0**-9  # half an ulp of bfloat16 in [0.5, 1)


def test_output_draws_the_figure(saved, tmp_path, capsys):
    image = tmp_path / "drift.png"
    assert main(["drift", str(saved / "model"), *ARGS, "-o", str(image)]) == 0
    assert image.read_bytes()[:8] == PNG_SIGNATURE
    assert main(["drift", str(saved / "model"), *ARGS, "-o", str(image)]) == 1  # exists
    assert "exists; use --force" in capsys.readouterr().err
    assert main(["drift", str(saved / "model"), *ARGS, "-o", str(image), "--force"]) == 0


@pytest.mark.parametrize("argv, message", [
    (["nowhere"], "PATH must be a model directory or a config.json"),
    (["{config}", "--positions", str(2**24)], r"positions[0] = 16777216"),
    (["{config}", "--tokens", "0"], "tokens must be at least 1"),
    (["{model}/model.safetensors"], "PATH must be a model directory or a config.json"),
], ids=["missing", "past 2**24", "no tokens", "not a config"])
def test_bad_arguments_exit_2_with_the_reason(saved, capsys, argv, message):
    places = {"config": saved / "config" / "config.json", "model": saved / "model"}
    argv = [a.format(**places) for a in argv]
    assert main(["drift", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "sinpe: error:" in err
    assert "patched by sinpe" not in err  # no forward pass ran


def test_an_unknown_dtype_is_a_usage_error(saved):
    with pytest.raises(SystemExit) as info:
        main(["drift", str(saved / "model"), "--dtype", "float16"])
    assert info.value.code == 2
