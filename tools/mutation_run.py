"""Hand-written mutation run: does the test suite notice a plausible bug?

Each mutant replaces one exact source fragment (it must occur exactly once, or the mutant is reported
`stale` and not counted) in a private copy of the repository (shutil.copytree, no .git/.venv), runs the
few fast tests chosen for it (`pytest -x -q` with the same interpreter, PYTHONPATH at the copy), and
restores the file. A mutant is killed when those tests fail (or time out). Every test selection is
first run unmutated: a selection that is red without a mutation makes its mutants `baseline-red`.

    make mutation [ONLY=id,...] [AREA=timing,...]
    .venv/bin/python tools/mutation_run.py [--only ID,...] [--area A,...] [--check] [--source worktree|head]

Prints one line per mutant, the score `killed K/N (P %)` and every survivor with its explanation (tools/mutants.py
EQUIVALENT); a full run writes tools/mutation_results.md. Exit 1 when a survivor is unexplained or a mutant is
stale or baseline-red.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# never "bundle": that is the package rowbeam/bundle (export outputs live under out/)
IGNORE = shutil.ignore_patterns(".git", ".venv*", "__pycache__", ".pytest_cache", ".ruff_cache", "dist", "build", "out",
                                "*.blend", "*.blend1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import EQUIVALENT, MUTANTS  # noqa: E402  (tools/ is no package)


def copy_repo(source: str, dst: Path) -> None:
    """The repository under test: the working tree (default) or the last commit (git archive HEAD)."""
    if source == "head":
        dst.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dst)], input=archive, check=True)
    else:
        shutil.copytree(REPO, dst, ignore=IGNORE, symlinks=True)


def run_tests(copy: Path, tests: tuple, timeout: float) -> tuple[str, float, str]:
    """('pass' | 'fail' | 'timeout' | 'error', seconds, last output line)."""
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", time.perf_counter() - t0, f"timed out after {timeout:.0f} s"
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if ln.strip()]
    status = {0: "pass", 1: "fail"}.get(r.returncode, "error")
    return status, time.perf_counter() - t0, (lines[-1] if lines else f"exit {r.returncode}")


def select(args) -> list:
    """The mutants picked by --only (ids) or --area (areas), both together their union; all by default.
    SystemExit(2) on unknown ids."""
    if not args.only and not args.area:
        return list(MUTANTS)
    wanted = set(args.only.split(",")) if args.only else set()
    unknown = wanted - {m.id for m in MUTANTS}
    if unknown:
        print(f"mutation_run: error: unknown mutant ids {sorted(unknown)}", file=sys.stderr)
        raise SystemExit(2)
    areas = set(args.area.split(",")) if args.area else set()
    return [m for m in MUTANTS if m.id in wanted or m.area in areas]


def fragment_problems(mutants) -> list[str]:
    """'id: fragment found N times in FILE' for every mutant whose fragment does not occur exactly once."""
    out = []
    for m in mutants:
        n = (REPO / m.file).read_text().count(m.old) if (REPO / m.file).exists() else 0
        if n != 1:
            out.append(f"{m.id}: fragment found {n} times in {m.file}")
    return out


def run_all(mutants, source: str, timeout: float) -> list:
    """[(mutant, verdict, seconds, last output line)] in a private copy of the tree."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="rowbeam_mutants_") as tmp:
        copy = Path(tmp) / "repo"
        copy_repo(source, copy)
        missing = [m.file for m in mutants if not (copy / m.file).exists()]
        if missing:
            raise SystemExit(f"mutation_run: error: the copy lacks {sorted(set(missing))[:3]}")
        baseline = {}
        for m in mutants:
            path = copy / m.file
            original = path.read_text()
            if original.count(m.old) != 1:
                rows.append((m, "stale", 0.0, f"fragment found {original.count(m.old)} times in {m.file}"))
                print(f"{'stale':13} {m.id}", flush=True)
                continue
            if m.tests not in baseline:
                baseline[m.tests] = run_tests(copy, m.tests, timeout)
            if baseline[m.tests][0] != "pass":
                rows.append((m, "baseline-red", 0.0, baseline[m.tests][2]))
                print(f"{'baseline-red':13} {m.id}: {baseline[m.tests][2]}", flush=True)
                continue
            path.write_text(original.replace(m.old, m.new))
            try:
                status, secs, last = run_tests(copy, m.tests, timeout)
            finally:
                path.write_text(original)
            verdict = {"fail": "killed", "timeout": "killed", "error": "killed", "pass": "SURVIVED"}[status]
            if status in ("timeout", "error"):
                verdict += f" ({status})"
            rows.append((m, verdict, secs, last))
            print(f"{verdict:13} {m.id} [{secs:.0f} s]: {last}", flush=True)
    return rows


def table(rows, summary: str) -> list[str]:
    """The Markdown results: score, every mutant, every survivor with its explanation."""
    lines = ["# Mutation run (`make mutation`, tools/mutation_run.py; mutants in tools/mutants.py)", "", summary, "",
             "| id | area | mutation | file | tests | result | s |", "|---|---|---|---|---|---|---|"]
    for m, verdict, secs, _last in rows:
        lines.append(f"| {m.id} | {m.area} | {m.what} | {m.file} | {' '.join(m.tests)} | {verdict} | {secs:.0f} |")
    survivors = [r[0] for r in rows if r[1] == "SURVIVED"]
    lines += ["", "## Survivors", ""]
    lines += [f"- `{m.id}` ({m.what}): {EQUIVALENT.get(m.id, 'NOT EXPLAINED: add a test that kills it')}"
              for m in survivors] or ["none"]
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated mutant ids")
    ap.add_argument("--area", help="comma-separated areas (timing, pixels, frames, lens, flow, flags, objects, ...)")
    ap.add_argument("--source", choices=("worktree", "head"), default="worktree")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per test run")
    ap.add_argument("--check", action="store_true", help="only check that every fragment occurs exactly once")
    ap.add_argument("--table", type=Path, default=REPO / "tools" / "mutation_results.md")
    args = ap.parse_args(argv)
    mutants = select(args)
    if args.check:
        problems = fragment_problems(mutants)
        print("\n".join(problems) or f"{len(mutants)} mutants, every fragment found once")
        return 1 if problems else 0
    t_start = time.perf_counter()
    rows = run_all(mutants, args.source, args.timeout)
    counted = [r for r in rows if r[1] not in ("stale", "baseline-red")]
    killed = [r for r in counted if r[1].startswith("killed")]
    wall = time.perf_counter() - t_start
    score = 100.0 * len(killed) / len(counted) if counted else 0.0
    summary = (f"killed {len(killed)}/{len(counted)} mutants ({score:.1f} %) in {wall / 60:.1f} min ({args.source}); "
               f"{len(rows) - len(counted)} stale or baseline-red")
    survivors = [r[0] for r in counted if r[1] == "SURVIVED"]
    print(summary)
    for m in survivors:
        print(f"survivor {m.id}: {m.what} -- {EQUIVALENT.get(m.id, 'not explained')}")
    lines = table(rows, summary)
    if args.only is None and args.area is None:
        args.table.write_text("\n".join(lines) + "\n")
    else:
        print("\n".join(lines[4:]))
    unexplained = [m for m in survivors if m.id not in EQUIVALENT]
    return 0 if not unexplained and len(counted) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
