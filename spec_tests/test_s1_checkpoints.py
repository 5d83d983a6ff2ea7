"""§1 resume, as trainers checkpoint: the loader's own state (torchdata's StatefulDataLoader
convention), the checked and the unchecked ways to resume, and elastic resume.

The global batch at step g is a function of (seed, g) and the pipeline alone (§1), so a
checkpoint is one integer (``next_g``) plus the pipeline's fingerprint. Whatever does not
change the global batches (rank, world size, workers, prefetch) may change between saving
and loading; what does (sampler, batch size, dataset, collator, seed, transform) is refused
by every checked route (``load_state_dict`` of a loader or a stream, ``iter(state=...)``).
``iter(start_g=...)`` is a bare step number, unchecked by design.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import onemodel_cy as om

from harness import _guard  # noqa: F401  (autouse: no worker thread may outlive a test)
from harness import (PREFETCH, WORKERS, Pipe, assert_meta, assert_no_workers, assert_ranks_compose,
                     assert_same, assert_stream_is_batch_at, drain_ok, examples, pipes)
from pipeline_parts import PyDataset


def through_json(state):
    return json.loads(json.dumps(state))


# --------------------------------------------------------------------------- the stateful path

@settings(max_examples=examples(0.5))
@given(pipe=pipes(), w1=WORKERS, p1=PREFETCH, w2=WORKERS, p2=PREFETCH, data=st.data())
def test_loader_state_dict_resumes_for_batch_in_loader(pipe, w1, p1, w2, p2, data):
    """§1 resume through the loader's own checkpoint: a run of `for batch in loader` passes
    that saves loader.state_dict() inside its loop body (after any number of batches, across
    epochs) and a fresh loader of the same pipeline (other workers and prefetch) that loads it
    together hand out exactly the uninterrupted run's batches, each once."""
    loader = pipe.loader(workers=w1, prefetch=p1)
    S = loader.steps_per_epoch
    j = data.draw(st.integers(1, 2 * S), label="batches before the checkpoint")
    total = 3 * S
    seen, state = [], None
    while state is None:
        for batch in loader:
            seen.append(batch)
            if len(seen) == j:
                state = through_json(loader.state_dict())     # in the loop body: counts this batch
                break
    loader.close()
    assert state["next_g"] == j
    resumed = pipe.loader(workers=w2, prefetch=p2)
    resumed.load_state_dict(state)
    assert resumed.epoch == j // S
    while len(seen) < total:
        seen.extend(resumed)        # the rest of j's epoch, then whole epochs
    resumed.close()
    assert_stream_is_batch_at(seen, pipe.loader(), range(total), f"checkpoint after {j} batches")
    assert_no_workers()


@pytest.mark.parametrize("workers", [0, 2])
def test_breaking_out_of_a_pass_resumes_mid_epoch(workers):
    """§1 resume on the stateful path: leaving `for batch in loader` midway (break) and
    iterating again continues at the first step not handed out, not at the epoch's step 0; the
    epoch then ends where it always ends, and the next pass runs the next epoch."""
    pipe = Pipe(sampler="shuffled", batch_size=2, count=24, augmentation="gain_offset")
    loader = pipe.loader(workers=workers, prefetch=3)
    S = loader.steps_per_epoch
    got = []
    for batch in loader:
        got.append(batch)
        if len(got) == 4:
            break
    assert loader.state_dict()["next_g"] == 4 and loader.epoch == 0
    got.extend(loader)                                  # steps 4 .. S-1
    assert [b.global_step for b in got] == list(range(S))
    assert loader.epoch == 1
    got.extend(loader)
    loader.close()
    assert_stream_is_batch_at(got, pipe.loader(), range(2 * S), "break at 4, then two passes")


def test_set_epoch_keeps_a_restored_position_in_its_own_epoch():
    """§1 resume with the usual epoch loop: after load_state_dict to the middle of epoch e,
    `loader.set_epoch(e)` keeps the position (the loop `for epoch in range(start, E):
    loader.set_epoch(epoch); for batch in loader` resumes the checkpoint), while set_epoch to
    another epoch moves to that epoch's first step."""
    pipe = Pipe(sampler="shuffled", batch_size=4, count=40)
    loader = pipe.loader()
    S = loader.steps_per_epoch
    loader.load_state_dict(pipe.loader().iter(S + 3).state_dict())
    loader.set_epoch(1)
    assert [b.global_step for b in loader] == list(range(S + 3, 2 * S))
    loader.set_epoch(0)
    assert [b.global_step for b in loader] == list(range(S))
    loader.epoch = 4                                    # the attribute goes through set_epoch
    assert loader.state_dict()["next_g"] == 4 * S


def test_set_epoch_never_discards_a_restored_position_without_a_word():
    """§1 resume: the README's loop copied with ``range(0, EPOCHS)`` instead of
    ``range(loader.epoch, EPOCHS)`` used to restart at step 0, silently (the position the
    checkpoint restored was discarded by ``set_epoch(0)``). Now ``set_epoch`` of another
    epoch than the restored position's raises, naming the position and the fix, and the
    position stays; once a pass has handed out a batch, set_epoch moves freely again."""
    pipe = Pipe(sampler="shuffled", batch_size=4, count=40)
    loader = pipe.loader()
    S = loader.steps_per_epoch
    loader.load_state_dict(dict(loader.state_dict(), next_g=2 * S + 1))
    with pytest.raises(ValueError, match=rf"set_epoch\(0\) would discard the position load_state_dict restored: "
                                         rf"global step {2 * S + 1} \(epoch 2, step 1 of {S}\).*range\(loader\.epoch"):
        loader.set_epoch(0)
    with pytest.raises(ValueError, match="would discard"):
        loader.epoch = 3
    assert loader.state_dict()["next_g"] == 2 * S + 1
    loader.set_epoch(2)                                 # its own epoch: kept
    passed = iter(loader)
    assert next(passed).global_step == 2 * S + 1
    passed.close()
    loader.set_epoch(0)                                 # the position was used: a free move
    assert loader.state_dict()["next_g"] == 0
    loader.load_state_dict(dict(loader.state_dict(), next_g=S))   # at an epoch's first step too
    with pytest.raises(ValueError, match="would discard"):
        loader.set_epoch(0)


def test_two_passes_opened_together_both_start_where_the_loader_stood():
    """§1 the stateful path: each `iter(loader)` starts at the loader's position when it is
    called (as PyTorch's iterators do), so two passes opened before either is consumed run the
    same steps."""
    pipe = Pipe(sampler="sequential", batch_size=2, count=12)
    loader = pipe.loader()
    loader.load_state_dict({"next_g": 2, "fingerprint": loader.fingerprint()})
    first, second = iter(loader), iter(loader)
    assert [b.global_step for b in first] == [b.global_step for b in second] == [2, 3, 4, 5]


# --------------------------------------------------------------------------- checked and unchecked routes

def _batch_size_changed(pipe):
    return replace(pipe, batch_size=pipe.batch_size * 2)


@pytest.mark.parametrize("change", [_batch_size_changed, lambda p: replace(p, seed=p.seed + 1),
                                    lambda p: replace(p, sampler_seed=p.sampler_seed + 1),
                                    lambda p: replace(p, width_multiple=4)])
def test_every_checked_route_refuses_another_pipeline(change):
    """Concern: resume checks (fingerprint). A checkpoint of one pipeline is refused with
    ValueError by every documented way of resuming it, into a pipeline with another batch size,
    seed, sampler seed or collator: loader.load_state_dict, stream.load_state_dict and
    loader.iter(state=...); the same state loads into the same pipeline by all three."""
    pipe = Pipe(sampler="shuffled", batch_size=2, count=40)
    with pipe.loader().iter(5) as stream:
        state = through_json(stream.state_dict())
    other = change(pipe).loader()
    with pytest.raises(ValueError, match="different pipeline"):
        other.load_state_dict(state)
    with other.iter() as stream, pytest.raises(ValueError, match="different pipeline"):
        stream.load_state_dict(state)
    with pytest.raises(ValueError, match="different pipeline"):
        other.iter(state=state)
    same = pipe.loader()
    same.load_state_dict(state)
    assert next(iter(same)).global_step == 5
    with same.iter(state=state, stop_g=7) as stream:
        assert len(stream) == 2 and next(stream).global_step == 5


def test_iter_state_excludes_start_g_and_respects_stop_g():
    """§1 resume arguments: iter() takes its first step from start_g or from state, never both
    (TypeError), and a state beyond stop_g is a ValueError; a non-dict state is a TypeError."""
    loader = Pipe(sampler="sequential", batch_size=2, count=20).loader()
    state = loader.iter(6).state_dict()
    with pytest.raises(TypeError, match="not both"):
        loader.iter(3, state=state)
    with pytest.raises(ValueError, match="beyond stop_g"):
        loader.iter(state=state, stop_g=4)
    with pytest.raises(TypeError, match="state_dict"):
        loader.iter(state=6)
    with pytest.raises(TypeError, match="state_dict"):
        loader.load_state_dict([6])


def test_a_bare_start_g_is_a_step_number_by_design():
    """§1 (a loader started at step k yields what an uninterrupted run yields from k on): an
    integer names a step of whatever pipeline receives it, so iter(start_g=k) of a pipeline
    with another batch size starts that pipeline at k without any check; this is documented
    as the unchecked route, for runs that keep only a step count."""
    pipe = Pipe(sampler="shuffled", batch_size=2, count=40)
    other = _batch_size_changed(pipe).loader()
    with other.iter(start_g=3, stop_g=5) as stream:
        batches = drain_ok(stream)
    assert_stream_is_batch_at(batches, other, range(3, 5), "unchecked start at 3")


def test_a_fingerprint_that_names_a_rank_is_another_pipeline():
    """Concern: resume checks. The fingerprint leaves rank and world size out (elastic
    resume); the pre-release form that ended with the saver's '|rank=r/w' is no longer read
    (CHANGELOG.md): such a state is refused, with both fingerprints in the message."""
    pipe = Pipe(sampler="shuffled", batch_size=4, count=40)
    loader = pipe.loader(rank=1, world_size=2)
    assert "rank" not in loader.fingerprint()
    old = {"next_g": 3, "fingerprint": loader.fingerprint() + "|rank=0/4"}
    with pytest.raises(ValueError, match="rank=0/4"):
        loader.load_state_dict(old)


# --------------------------------------------------------------------------- elastic resume

def _gray_pack(path, seed):
    rng = np.random.default_rng(seed)
    items = [(rng.integers(0, 256, (3, int(rng.integers(1, 9))), dtype=np.uint8), [i % 5], i) for i in range(12)]
    om.pack(items, path, progress=False, overwrite=True)


def _pack_loader(path, mean=0.5, std=0.25):
    dataset = om.PackedImageDataset(path, mean, std)
    return om.DataLoader(dataset, om.ShuffledSampler(len(dataset), 2, 3), om.ImageBatchCollator(), seed=7)


@pytest.mark.usefixtures("without_fsync")
def test_a_pack_is_named_by_its_content_not_its_path(tmp_path, monkeypatch):
    """Issue 22 (5): the fingerprint names a pack by its content (the manifest's SHA-256) and
    the mean and std it is served with. It used to hold the path: the same pack opened from a
    copy, with a trailing slash or by a relative path was refused, another pack of the same
    count written at the same path accepted. Now the first resume at the right step with the
    same bytes; another mean, another std, another pack at that path are refused."""
    path = str(tmp_path / "pack")
    _gray_pack(path, 1)
    with _pack_loader(path).iter(5) as stream:
        state = through_json(stream.state_dict())
    assert path not in state["fingerprint"]
    shutil.copytree(path, str(tmp_path / "copy"))
    monkeypatch.chdir(tmp_path)
    expected = _pack_loader(path).batch_at(5)
    for where in (str(tmp_path / "copy"), path + os.sep, "pack", os.path.join("..", tmp_path.name, "copy")):
        loader = _pack_loader(where)
        loader.load_state_dict(state)
        batch = next(iter(loader))
        assert batch.global_step == 5
        assert_same(batch, expected, f"resumed on {where}")
    _pack_loader(path, [0.5], np.float32(0.25)).load_state_dict(state)    # the same constants, as others
    for mean, std in ((0.4, 0.25), (0.5, 0.5)):
        with pytest.raises(ValueError, match="different pipeline"):
            _pack_loader(path, mean, std).load_state_dict(state)
    _gray_pack(path, 2)         # another pack, the same count, at the same path
    with pytest.raises(ValueError, match="different pipeline"):
        _pack_loader(path).load_state_dict(state)


class _NamedDataset(PyDataset):
    def __init__(self, inner, name):
        super().__init__(inner)
        self.name = name

    def fingerprint(self):
        return self.name


def test_a_dataset_names_itself_in_the_fingerprint_through_its_fingerprint_method():
    """Issue 22 (5): a dataset whose type defines fingerprint() is named by what it returns
    (instead of its repr); one returning something other than a str is a TypeError naming it."""
    inner = om.SyntheticLineImages(8, 3, 1, 9)
    sampler, collator = om.SequentialSampler(8, 2), om.ImageBatchCollator()
    loader = om.DataLoader(_NamedDataset(inner, "lines-v1"), sampler, collator, seed=1)
    assert "|lines-v1[8]|" in loader.fingerprint()
    with pytest.raises(TypeError, match=r"_NamedDataset.fingerprint\(\) must return a str, received int"):
        om.DataLoader(_NamedDataset(inner, 3), sampler, collator, seed=1).fingerprint()


def _shares(pipe, world_size, state, stop, workers, prefetch, route):
    """Every rank's batches from ``state`` to ``stop``, through the loader or a stream."""
    per_rank = []
    for r in range(world_size):
        loader = pipe.loader(workers=workers, prefetch=prefetch, rank=r, world_size=world_size)
        if route == "loader":
            loader.load_state_dict(state)
            got = []
            while len(got) < stop - state["next_g"]:
                got.extend(loader)
            loader.close()
            per_rank.append(got[:stop - state["next_g"]])
        else:
            with loader.iter(state=state, stop_g=stop) as stream:
                per_rank.append(drain_ok(stream))
    return per_rank


@settings(max_examples=examples(0.3))
@given(pipe=pipes(full_batches=True, max_batch=8).filter(lambda p: p.batch_size % 4 == 0),
       w1=WORKERS, p1=PREFETCH, w2=WORKERS, p2=PREFETCH, route=st.sampled_from(["loader", "stream"]),
       data=st.data())
def test_elastic_resume_from_world_size_4_to_2_gives_the_uninterrupted_batches(pipe, w1, p1, w2, p2, route,
                                                                              data):
    """§1, issue 10 (elastic resume): four ranks stop after k steps and checkpoint; two ranks,
    with other workers and prefetch, resume from rank 0's checkpoint; for every step the shares
    of the ranks then alive, side by side, are the global batch of one uninterrupted run."""
    whole = pipe.loader()
    S = whole.steps_per_epoch
    k = data.draw(st.integers(0, 2 * S), label="k")
    end = k + data.draw(st.integers(1, S + 1), label="steps after k")
    before = []
    for r in range(4):
        with pipe.loader(workers=w1, prefetch=p1, rank=r, world_size=4).iter(0, k) as stream:
            before.append(drain_ok(stream))
            saved = through_json(stream.state_dict())
        assert saved["next_g"] == k and saved["world_size"] == 4
        if r == 0:
            state = saved
    after = _shares(pipe, 2, state, end, w2, p2, route)
    for g in range(end):
        parts = [b[g] for b in before] if g < k else [a[g - k] for a in after]
        for part in parts:
            assert_meta(part, g, S)
        assert_ranks_compose([p.as_dict() for p in parts], whole.batch_at(g).as_dict(), pipe.width_multiple,
                             pipe.pad_value, f"{'4 ranks' if g < k else '2 ranks, resumed'} at step {g}")


def test_elastic_resume_from_world_size_2_to_4_and_to_1():
    """Issue 10 (elastic resume): the change load_state_dict used to refuse (2 -> 4) is
    accepted, and so is 2 -> 1: the single process then receives the global batch itself."""
    pipe = Pipe(sampler="bucketed", batch_size=8, count=48, augmentation="gain_offset")
    with pipe.loader(rank=1, world_size=2).iter(0, 3) as stream:
        drain_ok(stream)
        state = through_json(stream.state_dict())
    parts = []
    for r in range(4):
        loader = pipe.loader(workers=2, rank=r, world_size=4)
        loader.load_state_dict(state)
        parts.append(next(iter(loader)).as_dict())
        loader.close()
    whole = pipe.loader()
    assert_ranks_compose(parts, whole.batch_at(3).as_dict(), pipe.width_multiple, pipe.pad_value, "2 -> 4")
    alone = pipe.loader()
    alone.load_state_dict(state)
    assert_same(next(iter(alone)), whole.batch_at(3), "2 -> 1")
