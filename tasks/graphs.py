"""Graphs domain: put the nodes of a path in order from its shuffled edges (tiny, hf); reasoning-gym's
`largest_island` (hf).

Tiny prompt: the edges of a directed path over distinct letters, shuffled, each `x>y` ("an edge from
x to y") or, with probability `reverse_prob`, `y<x`; then the separator `?`: `b>d,c>a,a>b?` -> `cabd`,
the nodes from the path's start to its end. Worked solution: the edges followed from the start,
`c>a;a>b;b>d#cabd`. Guessing is worth 1/n! with n nodes, and the task is a lookup a 2-layer model
can learn (which node has no incoming edge, then whose edge leaves the node just written), so a
warm-up on imperfect answers leaves room for RL to sharpen; boolean truth tables (`tasks.logic`)
were beyond the tiny student, which is why `four_domain` uses this domain instead.

Worked prompt: a 6-node path (easy) whose start is given and whose edges are written as letter pairs,
`c:ab,ca,de,bd,ef?`; the solution follows the path edge by edge from the start, `ca,ab,bd,de,ef#cabdef`
(the shortest of the worked domains, ~22 tokens), and the alternative solution (the external
teacher's) writes the walk as one chain, `c>a>b>d>e>f#cabdef`. Measured on the ~1.3M student,
graphs-only warm-ups of 64 a step: finding the start (the one node no edge enters) was not learnt in
800 steps, so the start is given; with `a>b` edges, following them was not learnt in 800 steps
either (the next node is two tokens after the current one's occurrence), as letter pairs 6-node paths
reached 89% greedy after 200 steps; 8-node paths as pairs reached 1% after 800 steps alone, and 0%
after 2,000 steps of the four-domain warm-up, so paths have 6 nodes.

hf prompt: the same task in words ("c -> a"), answer the nodes in order; and reasoning-gym
`largest_island` (the area of the largest island of 1s in a grid).

Normalisation (own generators): extract the final answer, lower-case it and drop the separators a
node list is written with: arrows `->`, commas, spaces and a final `.` (`C -> A -> B -> D`, `c, a, b, d`
and `cabd` are the same answer); what remains must equal the reference.
reasoning-gym problems use its verifier.
"""

from __future__ import annotations

import random
import string
from typing import Any

from tasks.base import Problem, final_form, hf_prompt, is_rg, level_config, safe_score
from tasks.rg import sample_mix, score_rg

SEPARATOR = "?"

TINY_LEVELS: dict[str, dict[str, Any]] = {
    "easy": {"n_nodes": [3, 3], "reverse_prob": 0.0},
    "medium": {"n_nodes": [4, 4], "reverse_prob": 0.5},
    "hard": {"n_nodes": [5, 5], "reverse_prob": 0.5},
}

WORKED_LEVELS: dict[str, dict[str, Any]] = {
    "easy": {"n_nodes": [6, 6], "reverse_prob": 0.0},
    "medium": {"n_nodes": [7, 8], "reverse_prob": 0.0},
    "hard": {"n_nodes": [9, 10], "reverse_prob": 0.0},
}

HF_LEVELS: dict[str, list[tuple[str, float, dict[str, Any]]]] = {
    "easy": [("path", 1.0, {"n_nodes": [4, 5], "reverse_prob": 0.0}),
             ("rg:largest_island", 1.0, {"min_rows": 4, "max_rows": 5, "min_cols": 4, "max_cols": 5,
                                         "max_num_islands": 3, "max_island_size": 5})],
    "medium": [("path", 1.0, {"n_nodes": [6, 7], "reverse_prob": 0.3}),
               ("rg:largest_island", 1.0, {"min_rows": 5, "max_rows": 7, "min_cols": 5, "max_cols": 7,
                                           "max_num_islands": 4, "max_island_size": 8})],
    "hard": [("path", 1.0, {"n_nodes": [8, 10], "reverse_prob": 0.5}),
             ("rg:largest_island", 1.0, {"min_rows": 7, "max_rows": 10, "min_cols": 7, "max_cols": 10,
                                         "max_num_islands": 5, "max_island_size": 10})],
}


def _edges(rng: random.Random, level: dict[str, Any]) -> tuple[str, list[tuple[str, str, bool]]]:
    """(the path's nodes in order, its edges shuffled as (from, to, written reversed))."""
    path = "".join(rng.sample(string.ascii_lowercase, rng.randint(*level["n_nodes"])))
    edges = [(a, b, rng.random() < level["reverse_prob"]) for a, b in zip(path, path[1:])]
    rng.shuffle(edges)
    return path, edges


def _problem(rng: random.Random, level: dict[str, Any], difficulty: str, fmt: str) -> Problem:
    path, edges = _edges(rng, level)
    meta = {"generator": "path", "difficulty": difficulty, "fmt": fmt}
    if fmt == "worked":
        prompt = f"{path[0]}:" + ",".join(f"{a}{b}" for a, b, _ in edges) + SEPARATOR
        steps = ",".join(f"{a}{b}" for a, b in zip(path, path[1:]))
        final = final_form(path, fmt)
        return Problem("graphs", prompt, path, steps + final, meta, alt_solution=">".join(path) + final)
    if fmt == "tiny":
        prompt = ",".join(f"{b}<{a}" if rev else f"{a}>{b}" for a, b, rev in edges) + SEPARATOR
        steps = ";".join(f"{a}>{b}" for a, b in zip(path, path[1:]))
        return Problem("graphs", prompt, path, steps + final_form(path, fmt), meta)
    listed = ", ".join(f"{b} <- {a}" if rev else f"{a} -> {b}" for a, b, rev in edges)
    body = (f"A directed graph has the edges {listed} (`x -> y` and `y <- x` both mean an edge from x to y). "
            "Together they form one path through every node. List the nodes in path order, first to last.")
    steps = "\n".join(f"{a} -> {b}" for a, b in zip(path, path[1:]))
    solution = f"The start is {path[0]}, the only node with no incoming edge. Following the edges:\n{steps}\n"
    return Problem("graphs", hf_prompt(body), path, solution + final_form(path, fmt), meta)


def _normalise(text: str) -> str:
    """Lower-cased, without the separators a list of nodes is written with (`->`, `,`, spaces, a final `.`)."""
    return text.lower().strip().removesuffix(".").replace("->", "").replace(",", "").replace(" ", "")


class GraphsDomain:
    """Ordering a path's nodes from its shuffled edges; hf adds reasoning-gym's largest island."""

    name = "graphs"

    def config(self, difficulty: str, fmt: str) -> dict[str, Any]:
        return level_config(TINY_LEVELS, HF_LEVELS, SEPARATOR, difficulty, fmt, WORKED_LEVELS)

    def sample(self, rng: random.Random, difficulty: str, fmt: str) -> Problem:
        if fmt == "tiny":
            return _problem(rng, TINY_LEVELS[difficulty], difficulty, fmt)
        if fmt == "worked":
            return _problem(rng, WORKED_LEVELS[difficulty], difficulty, fmt)
        own = {"path": lambda settings: _problem(rng, settings, difficulty, fmt)}
        return sample_mix(rng, HF_LEVELS[difficulty], self.name, difficulty, own)

    def score(self, completion: str, problem: Problem) -> float:
        if is_rg(problem):
            return score_rg(completion, problem)
        return safe_score(completion, problem, _normalise, lambda got, p: got == p.answer)
