"""Shared timing helpers: median of interleaved repetitions, so machine drift hits every case alike."""
from __future__ import annotations

import statistics
import time


def rate(fn, units, repeats=5, min_seconds=0.2):
    """Units per second of ``fn()`` (each call does ``units`` units): (median, min, max) over ``repeats``."""
    calls = 1
    while True:  # calibrate so one repetition lasts at least min_seconds
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if time.perf_counter() - start >= min_seconds or calls >= 1 << 20:
            break
        calls *= 2
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        rates.append(calls * units / (time.perf_counter() - start))
    return statistics.median(rates), min(rates), max(rates)


def interleaved(cases, repeats=5):
    """Run ``cases`` ({name: (fn, units)}) round-robin ``repeats`` times; name -> (median, min, max)."""
    samples = {name: [] for name in cases}
    for _ in range(repeats):
        for name, (fn, units) in cases.items():
            samples[name].append(rate(fn, units, repeats=1)[0])
    return {name: (statistics.median(v), min(v), max(v)) for name, v in samples.items()}
