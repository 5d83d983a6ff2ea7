"""Run every fuzz target (or one) for a bounded time, each in its own process.

    python fuzz/run.py --seconds 30 [--target image] [--artifacts DIR] [--jobs 2]

A target that crashes (a Python exception outside the allowed ones, a wrong result, a
segfault, a sanitizer report, out of memory) is reported with its artifact and the first
lines of its report, and the next target still runs. Prints executions per target and the
crashes found; exits 1 when any target found one. For the sanitizer build, run it with
the runtime preloaded (docs/safety.md).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import glob
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = sorted(os.path.basename(p)[len("fuzz_"):-3] for p in glob.glob(os.path.join(HERE, "fuzz_*.py")))
REPORT_MARKERS = ("Uncaught Python exception", "ERROR: AddressSanitizer", "runtime error:",
                  "ERROR: libFuzzer", "Traceback", "SUMMARY:")


def summary(log: str, lines: int = 14) -> str:
    """The report's first lines: from the first marker of a finding on."""
    rows = log.splitlines()
    for k, row in enumerate(rows):
        if any(m in row for m in REPORT_MARKERS):
            return "\n".join(rows[k:k + lines])
    return "\n".join(rows[-lines:])


def run_target(name: str, seconds: int, artifacts: str, rss_mb: int) -> dict:
    prefix = os.path.join(artifacts, f"{name}-")
    before = set(glob.glob(prefix + "*"))
    cmd = [sys.executable, os.path.join(HERE, f"fuzz_{name}.py"), f"-max_total_time={seconds}",
           f"-rss_limit_mb={rss_mb}", "-timeout=30", "-print_final_stats=1",
           f"-artifact_prefix={prefix}"]
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
        rc, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, log = "hung", (exc.stdout or b"").decode(errors="replace") + (exc.stderr or b"").decode(errors="replace")
    runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", log) or re.findall(r"Done (\d+) runs", log)
    found = sorted(set(glob.glob(prefix + "*")) - before)
    return {"name": name, "rc": rc, "execs": int(runs[-1]) if runs else None, "artifacts": found,
            "seconds": time.monotonic() - start, "log": log}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, required=True, help="fuzzing time per target")
    parser.add_argument("--target", choices=TARGETS, action="append", help="run only this target (repeatable)")
    parser.add_argument("--artifacts", default=os.path.join(HERE, "artifacts"),
                        help="where crashing inputs are written (default fuzz/artifacts)")
    parser.add_argument("--rss-limit-mb", type=int, default=3072, help="per target (each job)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="targets fuzzed at once, each in its own process (default 1; one per core)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, received {args.jobs}")
    os.makedirs(args.artifacts, exist_ok=True)
    failed = 0
    names = args.target or TARGETS
    # Each target is a process of its own (run_target waits on it), so threads are enough to
    # run several at once; each result is printed, in the targets' order, as soon as it is known.
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        results = pool.map(lambda name: run_target(name, args.seconds, args.artifacts, args.rss_limit_mb), names)
        for name, r in zip(names, results):
            crashed = r["rc"] != 0 or bool(r["artifacts"])
            failed += crashed
            print(f"{name:10s} execs={r['execs']} time={r['seconds']:.0f}s exit={r['rc']} "
                  f"{'CRASH ' + ', '.join(r['artifacts']) if crashed else 'ok'}", flush=True)
            if crashed:
                print("    " + summary(r["log"]).replace("\n", "\n    "), flush=True)
    print(f"fuzz: {failed} of {len(names)} targets found a crash")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
