"""The one timing helper of the benchmarks: interleaved repetitions and their medians.

Every benchmark measures its configurations round-robin (one repetition of each, then the
next round), so that drift of a shared machine hits every configuration alike, and reports
the median with the min-max of the repetitions.
"""
from __future__ import annotations

import statistics
import time


def timed(fn) -> tuple:
    """(what ``fn()`` returned, wall-clock seconds of the call)."""
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def seconds(fn) -> float:
    """Wall-clock seconds of one call ``fn()``."""
    return timed(fn)[1]


def summary(samples) -> tuple:
    """(median, min, max) of the samples."""
    return statistics.median(samples), min(samples), max(samples)


def round_robin(measures, repeats=5) -> dict:
    """``repeats`` rounds, each calling every ``measures`` entry ({name: fn returning one
    sample}) once, in order; name -> the list of its samples."""
    samples = {name: [] for name in measures}
    for _ in range(repeats):
        for name, measure in measures.items():
            samples[name].append(measure())
    return samples


def _calls(fn, calls):
    for _ in range(calls):
        fn()


def rate(fn, units, repeats=5, min_seconds=0.2):
    """Units per second of ``fn()`` (each call does ``units`` units): (median, min, max) over ``repeats``."""
    calls = 1
    while seconds(lambda: _calls(fn, calls)) < min_seconds and calls < 1 << 20:
        calls *= 2   # calibrate so one repetition lasts at least min_seconds
    samples = round_robin({"": lambda: calls * units / seconds(lambda: _calls(fn, calls))}, repeats)[""]
    return summary(samples)


def interleaved(cases, repeats=5):
    """Run ``cases`` ({name: (fn, units)}) round-robin ``repeats`` times; name -> (median, min, max)."""
    samples = round_robin({name: (lambda fn=fn, units=units: rate(fn, units, repeats=1)[0])
                           for name, (fn, units) in cases.items()}, repeats)
    return {name: summary(v) for name, v in samples.items()}


def _copy_loop(conn, make_run, args):
    """One copy of TwoCopies: ``run = make_run(*args)``, warmed up, then ``run(n)`` per request."""
    run = make_run(*args)
    run(32)
    conn.send("ready")
    while (n := conn.recv()) is not None:
        run(n)
        conn.send("done")


class TwoCopies:
    """The ceiling of two processes on this machine: two independent copies of a 0-worker
    loop, one per process, timed together. A loader's workers do the same work and more
    (hand-offs), so they cannot beat it; the gap between the two is what the loader loses.

    ``make_run(*args)`` (picklable: a module-level function) runs in each process and
    returns a function ``run(n)`` that builds ``n`` batches, as the 0-worker row does."""

    def __init__(self, make_run, *args):
        import multiprocessing as mp
        ctx = mp.get_context("spawn")
        self.pipes, self.processes = [], []
        for _ in range(2):
            ours, theirs = ctx.Pipe()
            process = ctx.Process(target=_copy_loop, args=(theirs, make_run, args), daemon=True)
            process.start()
            self.pipes.append(ours)
            self.processes.append(process)
        for conn in self.pipes:
            conn.recv()

    def run(self, n):
        """(batches built, seconds) of both copies building n / 2 batches each at once."""
        start = time.perf_counter()
        for conn in self.pipes:
            conn.send(n // 2)
        for conn in self.pipes:
            conn.recv()
        return (n // 2) * 2, time.perf_counter() - start

    def rate(self, n):
        """Batches per second of both copies building n / 2 batches each at once."""
        count, elapsed = self.run(n)
        return count / elapsed

    def close(self):
        for conn, process in zip(self.pipes, self.processes):
            conn.send(None)
            process.join(10)


def against_ceiling(label, two_workers, zero_workers, ceiling):
    """The sentence every benchmark prints for a 2-worker figure: its ratio to the 0-worker
    figure and to the two-process ceiling measured in the same rounds (the ceiling's own
    ratio to 0 workers says how much two cores give this work on this machine right now)."""
    return (f"{label}: 2 workers / 0 workers {two_workers / zero_workers:.2f}; 2 workers / the ceiling "
            f"{two_workers / ceiling:.2f} (the ceiling / 0 workers {ceiling / zero_workers:.2f})")
