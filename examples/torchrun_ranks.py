"""Each torchrun rank loads only its share of every global batch; together they are the global batch.

Run on CPU (gloo) with two processes:

    torchrun --nproc_per_node=2 examples/torchrun_ranks.py
    # or: python -m torch.distributed.run --nproc_per_node=2 --standalone examples/torchrun_ranks.py

Every rank builds the same pipeline (a small version of the spec's §7 workload: synthetic
text lines, shuffled, width multiple 4, a gain/offset augmentation) with
``DataLoader(..., rank=RANK, world_size=WORLD_SIZE, workers=2)``. The ranks do not talk to
each other to load: rank r simply builds slots [r*B/w, (r+1)*B/w) of each global batch.

To prove it, for a few steps every rank's images (padded to a common width for the
collective), widths, targets, labels and indices are all-gathered; rank 0 builds the global
batch locally with ``world_size=1`` and checks that the ranks' shares put side by side are
exactly that batch (images compared bit for bit over each sample's real width). The
process exits with status 1 on any mismatch, 0 otherwise.

Elastic resume: the global batch at step g does not depend on the world size, so a run may
stop at one world size and resume at another. ``--save-state PATH`` makes rank 0 write the
stream's checkpoint (``state_dict()``, JSON) after the last step; ``--resume PATH`` starts
every rank from such a checkpoint, whatever world size saved it
(``loader.iter(state=...)``, which checks the pipeline), and the same comparison with the
global batch proves that the new world receives the batches of an uninterrupted run:

    torchrun --nproc_per_node=4 examples/torchrun_ranks.py --steps 6 --save-state /tmp/ranks.json
    torchrun --nproc_per_node=2 examples/torchrun_ranks.py --steps 10 --resume /tmp/ranks.json

``--perturb-rank R`` makes rank R use another seed: the check must then fail (used by the
test suite to show the check can fail). Run without torchrun, the script runs as a single
rank (world size 1) without initialising torch.distributed.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist

import onemodel_cy as om

BATCH_SIZE = 16
WIDTH_MULTIPLE = 4
PAD_VALUE = 0.0


def build_loader(seed, rank, world_size, workers):
    """The §7-like pipeline, small: 256 synthetic lines of height 32 and width 64-256."""
    dataset = om.SyntheticLineImages(256, height=32, min_width=64, max_width=256, seed=0)
    sampler = om.ShuffledSampler(len(dataset), BATCH_SIZE, seed=seed)
    collator = om.ImageBatchCollator(width_multiple=WIDTH_MULTIPLE, pad_value=PAD_VALUE,
                                     augmentation=om.GainOffset(0.2, 0.1))
    return om.DataLoader(dataset, sampler, collator, seed=seed, workers=workers, prefetch=4,
                         rank=rank, world_size=world_size)


def gather_padded(tensor, world_size, dim, fill):
    """All-gather tensors that may differ in size along ``dim``: pad to the largest first."""
    size = torch.tensor([tensor.shape[dim]], dtype=torch.int64)
    sizes = [torch.zeros_like(size) for _ in range(world_size)]
    dist.all_gather(sizes, size)
    widest = int(max(s.item() for s in sizes))
    pad_shape = list(tensor.shape)
    pad_shape[dim] = widest - tensor.shape[dim]
    padded = torch.cat([tensor, torch.full(pad_shape, fill, dtype=tensor.dtype)], dim=dim)
    out = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(out, padded.contiguous())
    return [o.narrow(dim, 0, int(s.item())) for o, s in zip(out, sizes)]


def gather_share(batch, world_size):
    """Every rank's share of this step, as numpy arrays, on every rank."""
    if world_size == 1:
        return [{name: np.asarray(value) for name, value in batch.as_dict().items()}]
    shares = [dict() for _ in range(world_size)]
    for name, dim, fill in (("images", 3, PAD_VALUE), ("targets", 0, 0)):
        for r, t in enumerate(gather_padded(torch.from_numpy(getattr(batch, name)), world_size, dim, fill)):
            shares[r][name] = t.numpy()
    for name in ("widths", "target_lengths", "labels", "indices"):
        local = torch.from_numpy(getattr(batch, name))
        out = [torch.empty_like(local) for _ in range(world_size)]
        dist.all_gather(out, local)
        for r, t in enumerate(out):
            shares[r][name] = t.numpy()
    return shares


def check_own_padding(batch):
    """This rank pads to its own widest image (rounded up to the width multiple) with PAD_VALUE."""
    images, widths = batch.images, batch.widths
    problems = []
    wp = -(-int(widths.max()) // WIDTH_MULTIPLE) * WIDTH_MULTIPLE
    if images.shape[3] != wp:
        problems.append(f"padded width {images.shape[3]}, expected {wp}")
    for j, w in enumerate(widths):
        if not (images[j, :, :, w:] == np.float32(PAD_VALUE)).all():
            problems.append(f"sample {j}: padding is not {PAD_VALUE}")
    return problems


def compare(shares, whole):
    """Problems found comparing the ranks' shares side by side with the global batch."""
    problems = []
    for name in ("widths", "target_lengths", "labels", "indices", "targets"):
        joined = np.concatenate([s[name] for s in shares])
        if joined.dtype != whole[name].dtype or not np.array_equal(joined, whole[name]):
            problems.append(f"{name}: ranks give {joined.tolist()}, global batch {whole[name].tolist()}")
    slot = 0
    for r, share in enumerate(shares):
        for j, w in enumerate(share["widths"]):
            if slot >= len(whole["widths"]):
                problems.append(f"rank {r} has more samples than the global batch")
                return problems
            mine = np.ascontiguousarray(share["images"][j, :, :, :w])
            theirs = np.ascontiguousarray(whole["images"][slot, :, :, :w])
            if mine.shape != theirs.shape or mine.tobytes() != theirs.tobytes():
                problems.append(f"rank {r} sample {j} (global slot {slot}): image differs")
            slot += 1
    if slot != len(whole["widths"]):
        problems.append(f"the ranks hold {slot} samples, the global batch {len(whole['widths'])}")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20, help="steps to check (default 20: crosses an epoch)")
    parser.add_argument("--start-g", type=int, default=8, help="the first global step")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--perturb-rank", type=int, default=None,
                        help="this rank uses another seed, so the check must fail")
    parser.add_argument("--save-state", metavar="PATH", default=None,
                        help="after the last step, rank 0 writes the stream's state_dict() there (JSON)")
    parser.add_argument("--resume", metavar="PATH", default=None,
                        help="start at the checkpoint in PATH (saved at any world size) instead of --start-g")
    args = parser.parse_args(argv)

    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group(backend="gloo")
        rank, world_size = dist.get_rank(), dist.get_world_size()
    else:
        rank, world_size = 0, 1

    if BATCH_SIZE % world_size:
        print(f"batch size {BATCH_SIZE} is not divisible by world size {world_size}", file=sys.stderr)
        return 2
    seed = args.seed + (1 if rank == args.perturb_rank else 0)
    loader = build_loader(seed, rank, world_size, args.workers)
    whole_loader = build_loader(args.seed, 0, 1, workers=0) if rank == 0 else None

    resumed = None
    if args.resume is not None:
        with open(args.resume) as f:
            resumed = json.load(f)
        start = resumed["next_g"]
        stream = loader.iter(state=resumed, stop_g=start + args.steps)     # checks the pipeline
    else:
        start = args.start_g
        stream = loader.iter(start, start + args.steps)
    stop = start + args.steps
    problems, compared, t0 = [], 0, time.perf_counter()
    with stream:
        for batch in stream:
            g = batch.global_step
            problems += [f"step {g}, rank {rank}: {p}" for p in check_own_padding(batch)]
            shares = gather_share(batch, world_size)
            if rank == 0:
                whole = whole_loader.batch_at(g).as_dict()
                problems += [f"step {g}: {p}" for p in compare(shares, whole)]
                compared += len(whole["widths"])
            batch.close()
        if args.save_state is not None and rank == 0:
            with open(args.save_state, "w") as f:
                json.dump(stream.state_dict(), f)

    failed = torch.tensor([len(problems)], dtype=torch.int64)
    if distributed:
        dist.all_reduce(failed)
    for p in problems[:20]:
        print(f"[rank {rank}] MISMATCH {p}", file=sys.stderr)
    if rank == 0:
        status = "MISMATCH" if failed.item() else "OK"
        if resumed is not None:
            print(f"torchrun_ranks: resumed at step {start} from a state saved at world size "
                  f"{resumed.get('world_size', '?')}")
        if args.save_state is not None:
            print(f"torchrun_ranks: saved next_g={stop} at world size {world_size} to {args.save_state}")
        print(f"torchrun_ranks: {status}: world size {world_size}, steps {start}..{stop - 1} "
              f"(S = {loader.steps_per_epoch} per epoch), {compared} samples compared with the global batch, "
              f"{failed.item()} problems, {time.perf_counter() - t0:.2f} s")
    if distributed:
        dist.barrier()
        dist.destroy_process_group()
    return 1 if failed.item() else 0


if __name__ == "__main__":
    sys.exit(main())
