"""Process workers (``DataLoader(worker_mode="process")``, issue 12): what the contract tests
(run in both modes in ``test_s1_loader.py``) do not reach.

The shared-memory ring (§1, §5: batches are views of it, never overwritten while held, no
allocation in steady state, grown for a larger batch), the task board workers take steps
from (§1: any free worker takes the lowest step of the window), failures (a dead worker named with
its step and exit code, an exception whose pickle does not load), pickling errors, and
lifetimes (close from another thread, Ctrl-C, interpreter exit, a consumer killed with
SIGKILL: no worker process and nothing in /dev/shm left behind).

The pickled datasets live in ``pipeline_parts.py`` so that workers import no test modules.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import onemodel_cy as om
from onemodel_cy.collate.bufferpool import Block
from harness import _guard  # noqa: F401  (autouse: no worker may outlive a test)
from harness import HERE, ROOT, Pipe, assert_no_workers, assert_same, finish, assert_stream_is_batch_at, drain, drain_ok
from pipeline_parts import (DatasetBroke, DyingDataset, LockedDataset, RampDataset, StuckDataset,
                            TwoPartError, TwoPartFailing, UnloadableDataset)
from onemodel_cy.workers.shmring import Segment
from onemodel_cy.workers.taskboard import MAX_ENTRIES, TaskBoard, board_bytes


def _loader(dataset=None, workers=2, prefetch=2, sampler=None, **kw):
    ds = om.SyntheticLineImages(48, 3, 1, 9, seed=4) if dataset is None else dataset
    sampler = om.ShuffledSampler(len(ds), 4, 2) if sampler is None else sampler
    return om.DataLoader(ds, sampler, om.ImageBatchCollator(augmentation=om.GainOffset()), seed=5,
                         workers=workers, prefetch=prefetch, worker_mode="process", **kw)


# --------------------------------------------------------------------------- the ring

def test_batches_are_views_of_the_shared_ring_and_survive_while_held():
    """§5 through processes: every batch after the first is built by a worker straight into the
    ring (the consumer wraps the slot, it copies nothing), and a batch the user keeps is never
    overwritten: holding all 30 batches makes the ring grow instead, and each still carries the
    bytes of batch_at after the stream has ended."""
    loader = _loader()
    with loader.iter(0, 30) as stream:
        ring = stream._engine.ring
        held = drain_ok(stream)
        assert ring.delivered == 29, f"the workers delivered {ring.delivered} of 29 steps through the ring"
        assert ring.slots >= 29, f"30 batches held at once need 29 slots, the ring has {ring.slots}"
    finish(loader)      # the stream parked its processes in the loader; its close ends them
    assert_stream_is_batch_at(held, loader, range(30), "held batches after the stream ended")
    assert all(type(b.images.base) is Block for b in held)


def test_a_released_slot_is_reused_and_steady_state_adds_no_memory():
    """§5 steady state: batches dropped after use give their slots back; over 200 steps the
    ring keeps prefetch + workers + 1 slots and, once the largest batch was seen, no slot gets
    new memory (no segment is replaced)."""
    loader = _loader(prefetch=3)
    with loader.iter(0, 200) as stream:
        for batch in stream:
            if batch.global_step == 100:
                engine = stream._engine
                versions, slots = list(engine.versions), engine.ring.slots
        assert engine.ring.slots == slots <= 3 + 2 + 1
        assert engine.versions == versions, "a slot got new memory in steady state"
    finish(loader)


def test_the_ring_grows_when_a_larger_batch_comes():
    """§5 growth: every batch of a ramp is larger than the one before, so slots are given new,
    larger memory as the stream goes; the bytes stay those of batch_at."""
    ds = RampDataset(40)
    loader = _loader(ds, sampler=om.SequentialSampler(40, 2))
    with loader.iter(0, 20) as stream:
        engine = stream._engine
        batches = drain_ok(stream)
        assert sum(engine.versions) >= 4, "the ring never grew"
    assert_stream_is_batch_at(batches, loader, range(20), "growing batches")


@pytest.mark.parametrize("route", ["float32 plain", "float32 GainOffset", "gray8 pack"])
def test_batches_streamed_into_shared_memory_are_the_private_route_s(route, tmp_path):
    """§4 through the ring's memory: a worker streams a batch into a shared segment, which
    may lie on 4 KiB pages (the collator then asks for the next image's pages ahead,
    ``Block.small_pages``), with the same bits as the batch the private pool gets; with
    the threshold at 0 every batch streams."""
    from onemodel_cy.collate.collator import streamed_bytes
    from onemodel_cy.workers.shmring import ShmPool
    if route == "gray8 pack":
        rng = np.random.default_rng(3)
        om.pack([(rng.integers(0, 256, (7, int(rng.integers(1, 90))), dtype=np.uint8), [1], i) for i in range(40)],
                str(tmp_path / "pack"), progress=False)
        ds, aug = om.PackedImageDataset(str(tmp_path / "pack"), 0.5, 0.25), None
    else:
        ds = om.SyntheticLineImages(40, 7, 1, 90, seed=6)
        aug = om.GainOffset() if route == "float32 GainOffset" else None
    loader = om.DataLoader(ds, om.ShuffledSampler(len(ds), 6, 1), om.ImageBatchCollator(8, -1.0, aug), seed=5)
    pool = ShmPool()
    shared = loader._pipeline.with_pool(pool)
    workspace = shared.workspace()
    segments = [Segment.create(1 << 20) for _ in range(3)]
    previous = streamed_bytes(0)
    try:
        for g in range(12):
            pool.aim(segments[g % 3])
            batch = shared.build(g, workspace)
            assert pool.last_shared
            assert_same(batch, loader.batch_at(g), f"{route}, step {g}")
            del batch
    finally:
        streamed_bytes(previous)


def test_zero_copy_into_torch():
    """§5 through processes: torch.from_numpy of a batch's images shares the ring's memory."""
    import torch    # a test dependency (the torch extra), as in test_api_torch.py
    loader = _loader()
    with loader.iter(3, 6) as stream:
        batches = drain_ok(stream)
    tensor = torch.from_numpy(batches[-1].images)
    assert tensor.data_ptr() == batches[-1].images.ctypes.data
    assert_same(batches[-1], loader.batch_at(5), "step 5 seen through torch")


# --------------------------------------------------------------------------- the task board

def test_the_task_board_gives_each_posted_step_to_one_worker_lowest_first():
    """§1 (workers claim steps of the window in any order, never one twice): a claim takes the
    posted step with the lowest global step and marks it with the worker's number; a claimed
    step cannot be revoked, a posted one can; a worker sees the board through its own mapping."""
    board = TaskBoard.create(4)
    worker_view = TaskBoard(Segment(os.dup(board.fd), board_bytes(4)))
    assert worker_view.entries == 4 and worker_view.claim(0) is None
    e5, _ = board.post(1, 5, 0, 0, 0)
    e3, _ = board.post(2, 3, 1, 0, 0)
    e4, _ = board.post(3, 4, 2, 7, 64)
    assert worker_view.claim(1) == (e3, 2, 3, 1, 0, 0)
    assert board.claimant(e3) == 1 and not board.revoke(e3), "a claimed step was taken back"
    assert board.revoke(e5) and board.claimant(e5) == -1
    assert worker_view.claim(0) == (e4, 3, 4, 2, 7, 64)
    assert worker_view.claim(0) is None, "a revoked step was claimed"
    board.free(e3)          # its answer came: entries e5 and e3 are free, e4 is claimed
    assert [board.post(task, task + 5, task, 0, 0)[0] for task in (4, 5, 6)] == [e5, e3, 3]
    with pytest.raises(RuntimeError, match="all 4 entries"):
        board.post(7, 12, 7, 0, 0)
    board.free(e4)
    assert board.post(8, 13, 8, 0, 0) == (e4, False), "a post saw a sleeper where none is"
    assert worker_view.sleeping(+1) == 1 and board.sleepers == 1
    assert board.revoke(e3)
    assert board.post(9, 14, 9, 0, 0) == (e3, True), "a post did not see the sleeping worker"
    assert worker_view.sleeping(-1) == 0 and not worker_view.stopping
    board.stop()
    assert worker_view.stopping


def test_a_task_board_refuses_a_count_its_memory_cannot_hold():
    """Memory safety: a worker trusts no size it reads from shared memory; a board whose
    count word says more entries than its segment holds is refused, as is an entry out of
    range, a segment never mapped, and a mapping larger than its shared-memory file."""
    segment = Segment.create(board_bytes(2))
    board = TaskBoard(segment, 2)
    with pytest.raises(IndexError, match="entry 2 of a task board of 2"):
        board.claimant(2)
    with pytest.raises(ValueError):
        board_bytes(0)
    with pytest.raises(ValueError):
        board_bytes(MAX_ENTRIES + 1)
    with open(segment.fd, "r+b", closefd=False) as f:
        f.seek(16)
        f.write(np.int64(1 << 40).tobytes())        # the count word
    with pytest.raises(ValueError, match="cannot hold the 1099511627776 entries"):
        TaskBoard(Segment(os.dup(segment.fd), segment.size))
    with pytest.raises(ValueError, match="needs a mapped segment"):
        TaskBoard(Segment.__new__(Segment))         # never mapped
    with pytest.raises(ValueError, match=f"a mapping of {2 * segment.size} bytes was asked of a shared-memory "
                                         f"file of {segment.size} bytes"):
        Segment(os.dup(segment.fd), 2 * segment.size)    # past the file's end: a read there would fault


def _child_env():
    """The environment of a Python child process that imports the package and the test modules."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]))


_CLAIMER = textwrap.dedent(r"""
    import os, sys
    from onemodel_cy.workers.shmring import Segment
    from onemodel_cy.workers.taskboard import TaskBoard
    fd, size, k = map(int, sys.argv[1:])
    board = TaskBoard(Segment(fd, size))
    sys.stdout.write("go\n"); sys.stdout.flush()
    sys.stdin.readline()
    taken = []
    while (claimed := board.claim(k)) is not None:
        taken.append(claimed[1])
    print(" ".join(map(str, taken)))
""")


def test_two_processes_claiming_at_once_never_take_one_step_twice():
    """§1 (a step is built once): two processes claim from one board at the same time, until
    it is empty; every posted task goes to exactly one of them (the claim is a compare-and-swap
    on shared memory)."""
    count = 3000
    board = TaskBoard.create(count)
    for task in range(count):
        board.post(task, task, task, 0, 0)
    children = [subprocess.Popen([sys.executable, "-c", _CLAIMER, str(board.fd), str(board_bytes(count)), str(k)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_child_env(),
                                 pass_fds=[board.fd]) for k in range(2)]
    for child in children:
        assert child.stdout.readline() == "go\n"
    for child in children:
        child.stdin.write("\n")
        child.stdin.flush()
    taken = [list(map(int, child.communicate(timeout=60)[0].split())) for child in children]
    everything = taken[0] + taken[1]
    assert sorted(everything) == list(range(count)), (
        f"{len(everything)} claims for {count} tasks, {len(everything) - len(set(everything))} taken twice")


def test_a_slow_worker_holds_one_step_of_the_window_not_its_share():
    """§1 (workers build the window in any order): while one worker is stuck in step 3 for
    seconds, the other builds every other step of the window (4, 5 and 6 at prefetch 4).
    Steps handed to the workers in turn would leave one of them queued behind the stuck one.
    The stream's bytes are batch_at's."""
    pipe = Pipe(sampler="sequential", batch_size=2, count=40)
    bad = int(pipe.om_sampler().indices(0, 3)[0])
    loader = _loader(StuckDataset(pipe.base_dataset(), bad, 3.0), sampler=pipe.om_sampler(), prefetch=4)
    with loader.iter(0, 12) as stream:
        batches = drain_ok(stream, 3)
        engine = stream._engine
        rest = []
        consumer = threading.Thread(target=lambda: rest.extend(drain_ok(stream)))
        consumer.start()        # it waits in step 3, and meanwhile takes in what the workers send
        deadline = time.monotonic() + 2.5
        while not {4, 5, 6} <= set(engine.results) and time.monotonic() < deadline:
            time.sleep(0.01)
        built = set(engine.results)
        assert 3 not in built and {4, 5, 6} <= built, f"while step 3 was stuck, the steps built were {sorted(built)}"
        consumer.join(20)
    assert_stream_is_batch_at(batches + rest, loader, range(12), "around a stuck worker")


def test_a_new_position_after_answers_not_yet_read_finds_room_on_the_board():
    """§1 (a kept engine serves the next stream at any position; review of the task board):
    a worker's entry is freed only when the consumer reads its answer, so steps the workers
    built and answered while the consumer was busy stay claimed. Moving to a new position
    then must still post the new window: at prefetch 6 with 2 workers, 6 answered steps not
    yet read plus a new window of 6 exceed the 8 entries of the board."""
    loader = _loader(prefetch=6)
    with loader.iter(0, 40) as stream:
        drain_ok(stream, 2)
        board = stream._engine.board
        deadline = time.monotonic() + 20
        while board.sleepers < 2 and time.monotonic() < deadline:     # the whole window built, unread
            time.sleep(0.01)
        assert board.sleepers == 2, "the workers did not finish the window"
    with loader.iter(30, 40) as stream:
        batches = drain_ok(stream)
    assert_stream_is_batch_at(batches, loader, range(30, 40), "after a move with answers unread")
    finish(loader)


# --------------------------------------------------------------------------- failures

@pytest.mark.parametrize("how,code", [("exit", 3), ("kill", -signal.SIGKILL), ("segfault", -signal.SIGSEGV)])
def test_a_dead_worker_is_reported_at_its_step_with_its_exit_code(how, code):
    """§1 (errors), issue 12: a worker process that dies (os._exit, killed, a segfault in user
    code) is reported at the step it was building, naming that step and the exit code; every
    step before arrives; never a hang."""
    pipe = Pipe(sampler="sequential", batch_size=2, count=40)
    g = 7
    bad = int(pipe.om_sampler().indices(0, g)[1])
    loader = _loader(DyingDataset(pipe.base_dataset(), bad, how), sampler=pipe.om_sampler(), prefetch=3)
    batches, error = drain(loader.iter(), stall=10.0)
    assert [b.global_step for b in batches] == list(range(g))
    assert isinstance(error, RuntimeError), repr(error)
    if how == "segfault" and "libasan" in os.environ.get("LD_PRELOAD", ""):
        code = -signal.SIGABRT      # the sanitizer CI step: ASan's SEGV handler reports, then aborts
    assert f"global step {g}" in str(error) and f"exit code {code}" in str(error), str(error)
    assert_no_workers("after a worker died")


def test_an_exception_that_does_not_unpickle_arrives_as_text():
    """§1 (errors): an exception whose pickle cannot be loaded still arrives at its step: a
    RuntimeError naming its type and message, with the worker's traceback text."""
    pipe = Pipe(sampler="sequential", batch_size=2, count=40)
    bad = int(pipe.om_sampler().indices(0, 5)[0])
    loader = _loader(TwoPartFailing(pipe.base_dataset(), bad), sampler=pipe.om_sampler())
    batches, error = drain(loader.iter())
    assert len(batches) == 5
    assert isinstance(error, RuntimeError) and not isinstance(error, TwoPartError)
    assert "TwoPartError" in str(error) and f"broken read at {bad}" in str(error)
    notes = "\n".join(error.__notes__)
    assert "in get_sample" in notes and "global step 5" in notes, notes


def test_a_pipeline_that_cannot_be_rebuilt_in_a_worker_stops_the_stream_at_its_first_worker_step():
    """§1 (errors): a dataset that pickles but raises when a worker loads it is reported at
    the first step the workers were to build (the consumer builds step 0 itself), with its
    type, message and the worker's traceback; then the stream is over and no worker remains."""
    pipe = Pipe(sampler="sequential", batch_size=2, count=40)
    loader = _loader(UnloadableDataset(pipe.base_dataset()), sampler=pipe.om_sampler())
    batches, error = drain(loader.iter())
    assert [b.global_step for b in batches] == [0]
    assert isinstance(error, DatasetBroke) and "cannot be loaded in this process" in str(error), repr(error)
    notes = "\n".join(error.__notes__)
    assert "global step 1" in notes and "_refuse_to_load" in notes, notes
    finish(loader)
    assert_no_workers("after a worker could not rebuild the pipeline")


def _write_gray_pack(path, seed):
    rng = np.random.default_rng(seed)
    items = [(rng.integers(0, 256, (3, int(rng.integers(1, 9))), dtype=np.uint8), [i % 5], i) for i in range(12)]
    om.pack(items, path, progress=False, overwrite=True)


@pytest.mark.usefixtures("without_fsync")
def test_a_pack_repacked_in_place_is_refused_by_process_workers_not_mixed(tmp_path):
    """Issue 22 (1): a pack re-packed in place (overwrite=True) after it was opened holds
    other samples at the same path. Workers used to reopen the path and serve them next to
    the consumer's: now each refuses it (its manifest's SHA-256 is not the one opened), and
    the stream raises that PackError, naming the folder, after batches all of the first pack."""
    path = str(tmp_path / "pack")
    _write_gray_pack(path, 1)
    dataset = om.PackedImageDataset(path, 0.5, 0.25)
    _write_gray_pack(path, 2)                         # same count, other pixels
    loader = _loader(dataset, sampler=om.SequentialSampler(len(dataset), 2))
    batches, error = drain(loader.iter(0, 2 * loader.steps_per_epoch))
    assert isinstance(error, om.PackError), repr(error)
    assert f"{path} was replaced since it was opened" in str(error) and dataset.manifest_sha256 in str(error)
    assert_stream_is_batch_at(batches, loader, range(len(batches)), "before the refusal")
    finish(loader, "after a worker refused a replaced pack")


@pytest.mark.usefixtures("without_fsync")
def test_a_pack_opened_by_a_relative_path_is_the_one_workers_read_after_chdir(tmp_path, monkeypatch):
    """Issue 22 (1): a pack opened by a relative path is resolved when it is opened; after an
    os.chdir into a folder holding another pack of that name, process workers used to read
    that one. Now the stream is the thread route's, every batch."""
    for name, seed in (("one", 1), ("two", 2)):
        os.mkdir(tmp_path / name)
        _write_gray_pack(str(tmp_path / name / "pack"), seed)
    monkeypatch.chdir(tmp_path / "one")
    dataset = om.PackedImageDataset("pack", 0.5, 0.25)
    monkeypatch.chdir(tmp_path / "two")
    loader = _loader(dataset, sampler=om.SequentialSampler(len(dataset), 2))
    batches = drain_ok(loader.iter(0, 2 * loader.steps_per_epoch))
    assert_stream_is_batch_at(batches, loader, range(2 * loader.steps_per_epoch), "after chdir")
    finish(loader)


def test_an_unpicklable_dataset_or_transform_is_named():
    """Issue 12: a dataset (or transform) that cannot be pickled is a TypeError when the stream
    starts, naming which part failed and its type; no process is left."""
    with pytest.raises(TypeError, match=r"dataset .*LockedDataset cannot be pickled"):
        _loader(LockedDataset(om.SyntheticLineImages(48, 3, 1, 9))).iter()
    with pytest.raises(TypeError, match=r"the transform .*function cannot be pickled"):
        _loader(transform=lambda sample, rng: sample).iter()
    assert_no_workers()


@pytest.mark.parametrize("mode,error", [("fork", ValueError), ("", ValueError), (1, TypeError), (None, TypeError)])
def test_bad_worker_mode_is_refused(mode, error):
    """Concern: argument checks. worker_mode is "thread" or "process"."""
    with pytest.raises(error, match="worker_mode"):
        om.DataLoader(
            om.SyntheticLineImages(8, 2, 1, 3), om.SequentialSampler(8, 2), om.ImageBatchCollator(), seed=0,
            workers=1, worker_mode=mode)


# --------------------------------------------------------------------------- lifetimes

def test_close_from_another_thread_ends_a_consumer_waiting_on_a_stuck_worker():
    """Concern: bounded shutdown. A consumer waiting for a step whose worker is stuck in user
    code (a 60 s read) stops when another thread closes the stream; the stuck process is
    terminated after the bounded wait, well before its read would end."""
    pipe = Pipe(sampler="sequential", batch_size=2, count=40)
    bad = int(pipe.om_sampler().indices(0, 3)[0])
    loader = _loader(StuckDataset(pipe.base_dataset(), bad, 60.0), sampler=pipe.om_sampler())
    stream = loader.iter()
    drain_ok(stream, 3)
    t0 = time.monotonic()
    closer = threading.Timer(0.3, stream.close)
    closer.start()
    with pytest.raises(StopIteration):
        next(stream)
    woke = time.monotonic() - t0
    closer.join(10)
    closed = time.monotonic() - t0
    assert woke < 2 and closed < 8, f"the consumer woke after {woke:.1f} s, close returned after {closed:.1f} s"
    assert_no_workers("after close from another thread")


def test_timeout_and_kept_workers_between_passes():
    """§1 (timeout; persistent workers): a step slower than ``timeout`` is a TimeoutError; a
    completed `for batch in loader` pass keeps its worker processes for the next pass (same
    pids), loader.close() ends them; switching worker_mode between streams changes nothing in
    the bytes."""
    pipe = Pipe(sampler="sequential", batch_size=2, count=40)
    bad = int(pipe.om_sampler().indices(0, 4)[0])
    slow = _loader(StuckDataset(pipe.base_dataset(), bad, 3.0), sampler=pipe.om_sampler(), timeout=0.5)
    with pytest.raises(TimeoutError):
        drain_ok(slow.iter(0, 10))
    loader = _loader(prefetch=3)
    S = loader.steps_per_epoch
    first = list(loader)
    pids = [p.pid for p in loader._idle_engine.threads]
    second = list(loader)
    assert [p.pid for p in loader._idle_engine.threads] == pids, "the second pass started new processes"
    loader.close()
    assert_no_workers("after loader.close()")
    loader.worker_mode = "thread"
    third = list(loader)
    loader.close()
    assert_stream_is_batch_at(first + second + third, loader, range(3 * S), "three passes, two modes")


_CHILD = textwrap.dedent("""
    import json, multiprocessing, os, signal, sys, time
    import onemodel_cy as om
    from multiprocessing import forkserver

    if __name__ == "__main__":
        # Ctrl-C raises KeyboardInterrupt, as in a terminal, even when this test runs as a
        # background job (which starts with SIGINT ignored, and Python keeps that).
        signal.signal(signal.SIGINT, signal.default_int_handler)
        ds = om.SyntheticLineImages(64, 3, 1, 9, seed=4)
        loader = om.DataLoader(ds, om.ShuffledSampler(64, 4, 2), om.ImageBatchCollator(), seed=1,
                               workers=2, prefetch=3, worker_mode="process")
        stream = loader.iter()
        held = [next(stream) for _ in range(6)]
        pids = [p.pid for p in stream._engine.threads] + [forkserver._forkserver._forkserver_pid]
        maps = "".join(open(f"/proc/{pid}/maps").read() for pid in [os.getpid()] + pids[:2])
        print(json.dumps({"pids": pids, "ring": [line.split(None, 5)[-1] for line in maps.splitlines()
                                                  if "onemodel_cy-ring" in line]}), flush=True)
        if sys.argv[1] == "hold":
            time.sleep(60)
        elif sys.argv[1] == "sigint":
            # A training loop interrupted by Ctrl-C: the KeyboardInterrupt lands inside next()
            # (the stream then ends its workers) or anywhere in the loop's own code (the stream
            # stays open, its workers alive); leaving `with loader:` ends them either way.
            try:
                with loader:
                    for batch in stream:
                        held = held[1:] + [batch]
            except KeyboardInterrupt:
                print(json.dumps([p.pid for p in multiprocessing.active_children()]), flush=True)
        # "exit": the interpreter exits with the stream open
""")


def _gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")   # a zombie has ended
    except (FileNotFoundError, ProcessLookupError):
        return True


def _shm():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _run_child(how):
    child = subprocess.Popen([sys.executable, "-c", _CHILD, how], stdout=subprocess.PIPE, text=True,
                             env=_child_env(), cwd=ROOT)
    report = json.loads(child.stdout.readline())
    return child, report


def _assert_all_gone(pids, before, what, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not all(_gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(p) for p in pids), f"{what}: processes left running: {[p for p in pids if not _gone(p)]}"
    ours = [n for n in _shm() - before if "onemodel" in n or n.startswith(("sem.mp-", "mp-", "psm_"))]
    assert not ours, f"{what}: left in /dev/shm: {ours}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and /dev/shm (Linux)")
@pytest.mark.parametrize("how", ["hold", "exit", "sigint"])
def test_no_process_or_shared_memory_outlives_the_consumer(how):
    """Issue 12 (clean lifetimes): a consumer killed with SIGKILL while holding batches, one
    whose interpreter exits with the stream open, and one interrupted by Ctrl-C leave no worker
    process (nor the forkserver) and nothing in /dev/shm: the ring's memory is anonymous
    (memfd), never a named file, and each worker exits when its consumer's socket ends."""
    before = _shm()
    child, report = _run_child(how)
    assert report["ring"], "the ring is not mapped in the consumer and its workers"
    assert all("/dev/shm" not in name and "memfd:" in name for name in report["ring"]), report["ring"]
    if how == "hold":
        child.send_signal(signal.SIGKILL)
    elif how == "sigint":
        time.sleep(0.3)
        child.send_signal(signal.SIGINT)
        assert json.loads(child.stdout.readline()) == [], "worker processes alive after Ctrl-C left `with loader:`"
    child.wait(20)
    child.stdout.close()
    _assert_all_gone(report["pids"], before, how)
