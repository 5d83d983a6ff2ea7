"""``DataLoader.profile()``: where a loader's time went, as figures a training loop can log.

The counters are a ``collate.profile.StageClock`` per loader, always on (a few clock reads
per batch, two per sample with a transform; the overhead measured is in
docs/performance.md, "Where the time went"). This module only reads them and says what
they mean.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

__all__ = ["LoaderProfile"]

_NS = 1e-9


@dataclass(frozen=True)
class LoaderProfile:
    """Where a loader's time went in this process since it was made, or since the last
    ``loader.profile(reset=True)``. Every figure is in seconds.

    On the consumer's thread (the one iterating the streams); ``build_s + wait_s <= wall_s``:

    - ``build_s``: building batches itself (0 workers; the first step of a stream whose
      workers are starting);
    - ``wait_s``: inside a worker engine's ``take``, waiting for a worker's batch (the
      packed lane's ``take`` also plans each batch for its workers);
    - ``other_s``: the rest of ``wall_s``, the training loop's own time (and any time
      between streams).

    On every thread of this process that built batches (the consumer at 0 workers, worker
    threads; each figure at most ``wall_s`` times the number of those threads):

    - ``get_sample_s``, ``transform_s``, ``augmentation_s``: the Python stages, calls of
      your dataset's ``get_sample``, your transform and a Python augmentation (a built-in
      ``GainOffset`` or ``GaussianNoise`` runs inside the copy);
    - ``copy_s``: the images copied into the batch (and staged for a Python augmentation),
      and the kernels of a built-in transform or augmentation (``onemodel_cy.augment``).

    Worker processes (``worker_mode="process"``) keep their stages to themselves: the
    consumer sees its waits only. The packed lane's workers copy without the GIL and are
    not counted either. ``advice`` says when the figures point to process workers.
    """

    wall_s: float
    batches: int
    build_s: float
    wait_s: float
    get_sample_s: float
    transform_s: float
    augmentation_s: float
    copy_s: float
    workers: int
    worker_mode: str

    @classmethod
    def read(cls, clock, workers: int, worker_mode: str) -> "LoaderProfile":
        """The figures of ``clock`` (a ``StageClock``) now."""
        return cls(wall_s=(clock.now_ns() - clock.start_ns) * _NS, batches=clock.batches,
                   build_s=clock.build_ns * _NS, wait_s=clock.wait_ns * _NS,
                   get_sample_s=clock.get_sample_ns * _NS, transform_s=clock.transform_ns * _NS,
                   augmentation_s=clock.augmentation_ns * _NS, copy_s=clock.copy_ns * _NS,
                   workers=workers, worker_mode=worker_mode)

    @property
    def python_s(self) -> float:
        """The Python stages together: ``get_sample_s + transform_s + augmentation_s``."""
        return self.get_sample_s + self.transform_s + self.augmentation_s

    @property
    def other_s(self) -> float:
        """The consumer's time outside the loader: ``wall_s - build_s - wait_s``."""
        return max(0.0, self.wall_s - self.build_s - self.wait_s)

    @property
    def advice(self) -> Optional[str]:
        """A sentence when the figures say the Python stages bound a thread-mode loader
        (more than half the consumer's time in the loader, which is at least a fifth of
        the wall time): then ``worker_mode="process"`` runs them side by side. None
        otherwise."""
        in_loader = self.build_s + self.wait_s
        if self.worker_mode != "thread" or in_loader < 0.2 * self.wall_s or self.python_s < 0.5 * in_loader:
            return None
        return (f"the Python stages (get_sample, transform, augmentation) took {self.python_s:.3g} s against "
                f"{in_loader:.3g} s the consumer spent in the loader; they hold the GIL, so worker threads "
                f"take turns at them: DataLoader(..., workers=2, worker_mode=\"process\") runs them side by "
                f"side (docs/guide.md, \"Workers and the GIL\")")

    def as_dict(self) -> Dict[str, Any]:
        """The figures as a flat dict (for a training loop's logger), with ``python_s`` and ``other_s``."""
        return {**asdict(self), "python_s": self.python_s, "other_s": self.other_s}

    def __str__(self) -> str:
        wall = self.wall_s or 1.0

        def line(name, seconds):
            return f"  {name:<16}{seconds:10.3f} s {100 * seconds / wall:6.1f} %"
        lines = [f"{self.batches} batches in {self.wall_s:.3f} s, {self.workers} workers "
                 f"({self.worker_mode} mode); on the consumer:",
                 line("building", self.build_s), line("waiting", self.wait_s), line("outside", self.other_s),
                 "on the threads of this process that built (Python stages and copies)"
                 + (", not the worker processes':" if self.worker_mode == "process" and self.workers else ":"),
                 line("get_sample", self.get_sample_s), line("transform", self.transform_s),
                 line("augmentation", self.augmentation_s), line("copies", self.copy_s)]
        if self.advice:
            lines.append("advice: " + self.advice)
        return "\n".join(lines)
