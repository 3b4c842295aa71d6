"""Train the drift models: small Llama models whose answers depend on exact relative distance.

    python examples/drift/train.py                  # every task, into examples/drift/models/
    python examples/drift/train.py --task lag --steps 200 --out /tmp/models

Each model is a ``transformers.LlamaForCausalLM`` with Llama 3's attention shape: heads
of 128 and rope theta 500000 (one head, one layer, hidden size 128), trained from a seed
on one task of ``tasks.py`` with the sequences placed at random offsets 0..4096 (as a
model sees positions within its context).  The distances are introduced a few at a time
(a curriculum: without it the attention never leaves uniform within minutes).  Each
model is saved with ``save_pretrained`` (``config.json``, ``model.safetensors``) beside a
``training.json`` saying how long it took and how busy the machine was.  Needs torch and
transformers; nothing is downloaded.  ``evaluate.py`` measures the models.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tasks import IGNORE, TASKS, VOCAB, Task  # noqa: E402

HERE = Path(__file__).resolve().parent
STEPS = {"lag": 800, "long": 400, "pairs": 200}
BATCH = {"lag": 32, "long": 8, "pairs": 32}
START = {"long": "lag", "pairs": "lag"}  # trained on from that model's weights
TRAINING_OFFSETS = 4096


def model_config() -> transformers.LlamaConfig:
    """Llama 3's head (128) and rope theta (500000); one head, one layer."""
    return transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=1,
        num_attention_heads=1, num_key_value_heads=1, head_dim=128, rope_theta=500000.0,
        max_position_embeddings=8192, tie_word_embeddings=True, bos_token_id=None,
        eos_token_id=None, pad_token_id=None)


def train(task: Task, steps: int, seed: int, init: transformers.LlamaForCausalLM | None = None,
          batch: int = 32, lr: float = 3e-3, log: bool = True
          ) -> tuple[transformers.LlamaForCausalLM, dict]:
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(model_config())
    if init is not None:
        model.load_state_dict(init.state_dict())
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, 2.0 * (1.0 - step / steps)))  # decay in the last half
    generator = torch.Generator().manual_seed(seed + 1)
    begin, cpu = time.perf_counter(), time.process_time()
    model.train()
    for step in range(steps):
        upto = max(4, min(task.span, int(task.span * step / (0.6 * steps))))
        # short sequences while the distances are few: the attention finds its first
        # targets among a few candidates, then the sequences grow with the distances
        longest = task.start + task.stride * (upto - 1)
        content = min(task.content, max(8, longest))
        count = min(task.queries, max(8, upto))
        x, answers = task.batch(batch, generator, upto, content, count)
        offset = int(torch.randint(0, TRAINING_OFFSETS, (1,), generator=generator))
        positions = (offset + torch.arange(x.shape[1])).expand(x.shape[0], -1)
        logits = model(input_ids=x, position_ids=positions).logits[:, task.query_positions(
            content, count)]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB),
                                                 answers.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if log and (step % 50 == 0 or step == steps - 1):
            scored = answers != IGNORE
            accuracy = float((logits.argmax(-1) == answers)[scored].float().mean())
            print(f"{task.name} step {step:4d}  distances {upto:3d}  loss {loss.item():.3f}  "
                  f"accuracy {accuracy:.3f}  {time.perf_counter() - begin:6.1f} s", flush=True)
    record = {"task": task.name, "steps": steps, "seed": seed, "batch": batch, "lr": lr,
              "seconds": round(time.perf_counter() - begin, 1),
              "cpu_seconds": round(time.process_time() - cpu, 1),
              "threads": torch.get_num_threads(),
              "load_average": [round(x, 2) for x in os.getloadavg()]}
    model.eval()
    return model, record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=sorted(TASKS), action="append",
                        help="a task to train (repeatable; default every task)")
    parser.add_argument("--steps", type=int, help="training steps (default per task: "
                        + ", ".join(f"{k} {v}" for k, v in STEPS.items()) + ")")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: the same sums on any machine)")
    parser.add_argument("--out", type=Path, default=HERE / "models")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    trained: dict[str, transformers.LlamaForCausalLM] = {}
    for name in sorted(args.task or TASKS, key=lambda n: n in START):
        start = START.get(name)
        if start is not None and start not in trained:
            trained[start] = transformers.LlamaForCausalLM.from_pretrained(args.out / start)
        model, record = train(TASKS[name], args.steps or STEPS[name], args.seed,
                              trained.get(start) if start else None, BATCH[name])
        record["start"] = start
        trained[name] = model
        target = args.out / name
        model.save_pretrained(target)
        (target / "generation_config.json").unlink(missing_ok=True)
        (target / "training.json").write_text(json.dumps(record, indent=1) + "\n")
        print(f"wrote {target}: {record}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
