"""What the settings cost a process: importing ``worker.settings`` plus the first ``Settings()``, this tree against
another (e.g. a checkout of main before a change of the settings), in one run.

    python bench/settings_cost.py --old /path/to/other/tree [--rounds 10]

Each round starts a fresh interpreter per tree (the shared dependencies, pydantic and the core, imported first so only
the settings are timed) and the two trees alternate, so the machine's load falls on both alike; the minimum is kept.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
PROBE = """
import time, pydantic, pydantic_settings, pydantic.dataclasses, json
import worker, worker.conversation
t = time.perf_counter()
import worker.settings
t1 = time.perf_counter()
worker.settings.Settings(_env_file=None)
print((t1 - t) * 1000, (time.perf_counter() - t1) * 1000)
"""


def once(tree: Path) -> tuple[float, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARLEY_") and k != "REDIS_URL"}
    env["PYTHONPATH"] = str(tree)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd="/", capture_output=True, text=True, check=True)
    imported, first = out.stdout.split()
    return float(imported), float(first)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", type=Path, required=True, help="the other tree (its worker/ package is imported)")
    p.add_argument("--rounds", type=int, default=10)
    a = p.parse_args()
    best: dict[str, tuple[float, float]] = {}
    for _ in range(a.rounds):
        for name, tree in (("old", a.old), ("new", HERE)):
            got = once(tree)
            if name not in best or sum(got) < sum(best[name]):
                best[name] = got
    for name, (imported, first) in best.items():
        print(f"{name}: import {imported:.1f} ms + first Settings() {first:.1f} ms = {imported + first:.1f} ms")
    print(f"new/old {sum(best['new']) / sum(best['old']):.2f}")


if __name__ == "__main__":
    main()
