"""Old against new in one run: a bench script's child runs alternately under two trees of Parley (this one and
``--old``, a folder holding another revision's ``worker/`` package, e.g. a ``git worktree`` of main), against one
Redis of its own, the order flipped every round, so the machine's load falls on both alike."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

Runs = dict[tuple[tuple[str, ...], str], list[dict[str, float]]]
"""Each child's figures, by (variant, tree label)."""


def options(n: int = 2000, rounds: int = 6) -> argparse.Namespace:
    """``--old TREE``, ``--n`` (work per child) and ``--rounds``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", required=True, help="the other tree (a folder holding its worker/ package)")
    parser.add_argument("--n", type=int, default=n)
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser.parse_args()


def run_alternating(script: str, opts: argparse.Namespace, variants: Sequence[tuple[str, ...]] = ((),)) -> Runs:
    """Run ``script --child PORT N *variant`` under each tree, ``opts.rounds`` times; each child prints one JSON
    object of figures."""
    sys.path.insert(0, str(ROOT))
    from tests.support.redis_server import start_redis

    server = start_redis()
    trees = {"old": str(Path(opts.old).resolve()), "new": str(ROOT)}
    results: Runs = {}
    try:
        for r in range(opts.rounds):
            for variant in variants:
                for label in ("old", "new") if r % 2 == 0 else ("new", "old"):
                    out = subprocess.run([sys.executable, script, "--child", str(server.port), str(opts.n), *variant],
                                         env={**os.environ, "PYTHONPATH": trees[label]}, cwd=trees[label],
                                         capture_output=True, text=True, check=True)
                    results.setdefault((tuple(variant), label), []).append(json.loads(out.stdout))
    finally:
        server.stop()
    return results
