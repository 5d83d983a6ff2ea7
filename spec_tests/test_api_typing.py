"""Concern: type annotations (issue 10), no spec section: a user's type checker catches a wrong
argument to the loader's API (``DataLoader(seed="x")``) and accepts correct use of it.

mypy is a test dependency (the ``test`` extra, which CI installs): a missing mypy is a
collection error here, never a skip. The check runs mypy as a user's project would see the
package: the snippets are the files checked, the package is imported (from the checkout,
through MYPYPATH) with ``--follow-imports=silent``, so only the snippets' own errors count;
the stubs of the compiled modules must load without an error of their own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

try:
    import mypy  # noqa: F401
except ImportError as exc:  # loud on purpose: this test must run in CI
    raise ImportError("spec_tests/test_api_typing.py needs mypy; install the test extras with "
                      "`pip install -e '.[test,torch]'`") from exc

from harness import ROOT

GOOD = textwrap.dedent("""
    import onemodel_cy as om
    from onemodel_cy.interop import to_jax, to_torch

    dataset = om.SyntheticLineImages(16, height=2, min_width=2, max_width=5, seed=1)
    loader = om.DataLoader(dataset, om.ShuffledSampler(16, 4, seed=2), om.ImageBatchCollator(), seed=0,
                           workers=2, prefetch=4, timeout=5.0, join_timeout=1.5, rank=0, world_size=2)
    stream: om.BatchStream = loader.iter(start_g=3, stop_g=9)
    remaining: int = len(stream)
    for batch in stream:
        tensors = to_torch(batch, pin_memory=True, device="cpu")
        arrays = to_jax(batch)
    state = loader.state_dict()
    loader.load_state_dict(state)
    with loader.iter(state=state) as resumed:
        first: om.ImageBatch = next(resumed)
    for b in loader:
        b.close()
""")

# Each line marked `# E` must be reported, and nothing else.
BAD = textwrap.dedent("""
    import onemodel_cy as om
    from onemodel_cy.interop import to_torch

    dataset = om.SyntheticLineImages(16, height=2, min_width=2, max_width=5, seed=1)
    sampler = om.ShuffledSampler(16, 4, seed=2)
    collator = om.ImageBatchCollator()
    loader = om.DataLoader(dataset, sampler, collator, seed="x")  # E
    om.DataLoader(dataset, sampler, collator, seed=0, workers="2")  # E
    om.DataLoader(dataset, sampler, collator, seed=0, join_timeout="1")  # E
    om.DataLoader(dataset, "sampler", collator, seed=0)  # E
    stream = loader.iter(start_g="3")  # E
    loader.iter(state=5)  # E
    loader.load_state_dict(7)  # E
    words: str = len(stream)  # E
    to_torch(next(stream), pin_memory="yes")  # E
""")


def test_a_type_checker_catches_wrong_arguments_and_accepts_correct_use(tmp_path):
    """Issue 10 (annotations): mypy reports every wrong-typed argument of DataLoader, iter,
    load_state_dict, len(stream) and to_torch in the bad snippet, at its line, and nothing in a
    snippet that uses the same API correctly."""
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    env = dict(os.environ, MYPYPATH=ROOT)
    run = subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--no-incremental",
                          "--cache-dir", str(tmp_path / "cache"), "--no-error-summary", "good.py", "bad.py"],
                         capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    errors = [line for line in run.stdout.splitlines() if ": error:" in line]
    assert run.returncode == 1 and errors, f"mypy found nothing wrong:\n{run.stdout}\n{run.stderr}"
    elsewhere = [e for e in errors if not e.startswith("bad.py:")]
    assert not elsewhere, "errors outside the bad snippet (in good.py or the package's stubs):\n" + "\n".join(
        elsewhere)
    reported = {int(re.match(r"bad\.py:(\d+):", e).group(1)) for e in errors}
    expected = {n for n, line in enumerate(BAD.splitlines(), 1) if line.endswith("# E")}
    assert reported == expected, f"expected errors at lines {sorted(expected)}, mypy said:\n" + "\n".join(errors)
