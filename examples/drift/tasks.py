"""The tasks of the drift models: sequences whose answers depend on exact relative distance.

A sequence is random content tokens followed by queries.  A query is a token that
names a distance ``L`` (one token per distance, ``DISTANCE + L``); the answer, which
the model must predict at the query's position, is the token exactly ``L`` positions
back.  Nothing in that token says it is the one: every earlier position is a
candidate, and only the relative position separates the answer from its neighbours,
as in attention heads that look a given distance back.  All tasks share one
vocabulary, so a model trained on one can start another.

- ``lag``: distances given in the input, 1..128: 64 queries after 128 tokens of
  content.  A short distance from a late query lands on an earlier query; such
  queries are not scored (their answer is ``IGNORE``), in training or evaluation.
- ``long``: long distances, 512..992 in steps of 32, after 1024 tokens of content.
- ``pairs``: many identical candidates: the whole sequence is pairs ``(K, v)`` whose
  first token ``K`` is the same token everywhere, content pairs and then query pairs
  ``(K, q)``; ``q`` names an even distance, 64..190, and the answer is the value it
  lands on.  Every other token is the same ``K``, one position from each candidate.

Imported by ``train.py`` and ``evaluate.py``; torch only.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

SYMBOLS = 64               # content tokens 0..63
KEY = SYMBOLS              # the pairs' repeated first token
DISTANCE = SYMBOLS         # distance L is token DISTANCE + L, L = 1..MAX_DISTANCE
MAX_DISTANCE = 1023
VOCAB = DISTANCE + MAX_DISTANCE + 1
IGNORE = -100              # an answer not scored (cross_entropy's ignore_index)


@dataclass(frozen=True)
class Task:
    """``content`` tokens, then ``queries`` queries (two tokens each, ``K q``, with
    ``pairs``), each asking for a distance ``start + stride * u``, ``u`` in
    ``0 .. span - 1``."""

    name: str
    content: int
    queries: int
    start: int
    stride: int
    span: int
    pairs: bool = False

    @property
    def length(self) -> int:
        return self.content + self.queries * (2 if self.pairs else 1)

    def query_positions(self, content: int | None = None, queries: int | None = None
                        ) -> torch.Tensor:
        """Where the queries are (the positions whose next token is scored)."""
        step = 2 if self.pairs else 1
        return (content or self.content) + step - 1 + step * torch.arange(queries or self.queries)

    def distances(self, u: torch.Tensor) -> torch.Tensor:
        """The distance of each query for the draws ``u`` (shape ``(..., queries)``)."""
        return self.start + self.stride * u

    def batch(self, size: int, generator: torch.Generator, upto: int | None = None,
              content: int | None = None, queries: int | None = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """``size`` sequences and the answers of their queries, shapes ``(size, length)``
        and ``(size, queries)`` (``IGNORE`` where the distance lands on a query).  The
        training's curriculum draws only the first ``upto``
        distances, in shorter sequences: ``content`` tokens, ``queries`` queries (the
        task's own by default; the distances must still land inside the sequence)."""
        content_, queries_ = content or self.content, queries or self.queries
        content = torch.randint(0, SYMBOLS, (size, content_), generator=generator)
        u = torch.randint(0, upto or self.span, (size, queries_), generator=generator)
        distance = self.distances(u)
        queries = DISTANCE + distance
        if self.pairs:
            content[:, 0::2] = KEY
            queries = torch.stack([torch.full_like(queries, KEY), queries], -1)
        x = torch.cat([content, queries.reshape(size, -1)], 1)
        where = self.query_positions(content_, queries_) - distance
        answers = torch.gather(x, 1, where)
        return x, answers.masked_fill(where >= content_, IGNORE)


TASKS = {
    "lag": Task("lag", 128, 64, 1, 1, 128),
    "long": Task("long", 1024, 32, 512, 32, 16),
    "pairs": Task("pairs", 192, 32, 64, 2, 64, pairs=True),
}
