"""``onemodel-cy demo``: the §7 workload served, timed beside torch's DataLoader, checked
against the conformance vector and resumed from a checkpoint."""
from __future__ import annotations

import time


DEMO_DESCRIPTION = """Load a standard workload of built-in synthetic data and check it: 2,048 text-line
images (height 32, widths 64-256), shuffled, in batches of 128 padded to a multiple of 4
pixels, each image with a gain/offset augmentation, 2 worker threads by default (the
workload of the OneModel data-loading text, section 7). It prints how fast the loader
serves it (with torch's DataLoader doing the same work beside it when torch is
installed), checks the first two epochs against the package's conformance vector (the
same bytes a port must produce), stops a run halfway, resumes it from its checkpoint and
compares every batch after the resume. Ends with one OK line, or exits 1."""

DEMO_IMAGES, DEMO_BATCH = 2048, 128
DEMO_VECTOR = "section7_two_epochs_digest"      # stream.json: steps 0..31 of this workload at seed 0


def _demo_dataset(om, seed):
    return om.SyntheticLineImages(DEMO_IMAGES, height=32, min_width=64, max_width=256, seed=seed)


def _demo_loader(om, seed, workers):
    dataset = _demo_dataset(om, seed)
    sampler = om.ShuffledSampler(len(dataset), DEMO_BATCH, seed=seed)
    collator = om.ImageBatchCollator(width_multiple=4, augmentation=om.GainOffset())
    return om.DataLoader(dataset, sampler, collator, seed=seed, workers=workers, prefetch=8)


def _warm_up(steps):
    """The batches of a timed pass left out of the timing: the first quarter, at most 8 (the
    workers start, the pool fills)."""
    return min(8, steps // 4)


def _timed_pass(stream, steps):
    """Batches per second over ``steps`` batches, holding the previous two (a training loop
    still uses them while the next is built); the warm-up (``_warm_up``) is not timed."""
    held = []
    warm = _warm_up(steps)
    for k, batch in zip(range(steps), stream):
        if k == warm:
            start = time.perf_counter()
        held.append(batch)
        if len(held) > 2:
            held.pop(0).close()
    elapsed = time.perf_counter() - start
    for batch in held:
        batch.close()
    return (steps - warm) / elapsed


def _torch_reference(om, steps):
    """torch's DataLoader doing the same work (a map-style dataset returning the image with
    the gain and offset applied, a collate_fn padding into one array), 0 workers, measured
    here; None without torch."""
    try:
        import torch
        import torch.utils.data
    except ImportError:
        return None
    import numpy as np
    source = _demo_dataset(om, 0)
    images = [source.get_sample(i).image.copy() for i in range(DEMO_IMAGES)]

    class Lines(torch.utils.data.Dataset):
        def __len__(self):
            return DEMO_IMAGES

        def __getitem__(self, i):
            return images[i] * np.float32(1.2) + np.float32(0.1)

    def collate(items):
        width = -(-max(image.shape[2] for image in items) // 4) * 4
        batch = np.zeros((len(items), 1, 32, width), np.float32)
        for k, image in enumerate(items):
            batch[k, :, :, :image.shape[2]] = image
        return torch.from_numpy(batch)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        feed = torch.utils.data.DataLoader(Lines(), batch_size=DEMO_BATCH, shuffle=True, drop_last=True,
                                           collate_fn=collate, generator=torch.Generator().manual_seed(0))
        done, start = 0, time.perf_counter()
        while done < steps:
            for _ in feed:
                done += 1
                if done == steps:
                    break
        return steps / (time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)


def _demo(args) -> int:
    """Serve the workload, time it beside torch, check it against the vector, resume it."""
    import onemodel_cy as om
    from onemodel_cy.conformance.codec import batch_digest, load

    loader = _demo_loader(om, args.seed, args.workers)
    workers = f"{args.workers} worker thread{'s' if args.workers != 1 else ''}" if args.workers else "no workers"
    print(f"workload: {DEMO_IMAGES:,} synthetic text-line images (height 32, widths 64-256), shuffled, batches of "
          f"{DEMO_BATCH} padded to a multiple of 4, gain/offset augmentation; {workers}, seed {args.seed}")
    with loader.iter(0) as stream:
        rate = _timed_pass(stream, args.steps)
    print(f"speed: {rate:,.0f} batches/s = {rate * DEMO_BATCH:,.0f} images/s over {args.steps} batches, "
          f"the first {_warm_up(args.steps)} not timed (the loop holds its last 2 batches, as training does)")
    reference = _torch_reference(om, min(args.steps, 100))
    if reference is None:
        print("reference: torch is not installed, so torch's DataLoader was not measured beside it "
              "(benchmarks/bench_loader.py compares the two, docs/performance.md)")
    else:
        print(f"reference: torch's DataLoader doing the same work here, 0 workers: {reference:,.0f} batches/s "
              f"(this loader serves {rate / reference:.1f}x as many)")

    # The first two epochs against the conformance vector (it pins seed 0), then the checks' digests.
    digests = []
    check_steps = max(args.steps, 32)
    with loader.iter(0, check_steps) as stream:
        for batch in stream:
            with batch:
                digests.append(batch_digest(batch.as_dict()))
    vector = next(case for case in load("stream.json")["cases"] if case["name"] == DEMO_VECTOR)
    if args.seed == 0:
        expected = vector["output"]["step_sha256"]
        for g, (mine, pinned) in enumerate(zip(digests, expected)):
            if mine.hex() != pinned:
                print(f"MISMATCH: global step {g} differs from the conformance vector {DEMO_VECTOR} "
                      f"(sha256 {mine.hex()[:16]}..., the vector holds {pinned[:16]}...)")
                return 1
        print(f"bytes: the first two epochs (32 batches) equal the conformance vector, sha256 "
              f"{vector['output']['sha256'][:16]}... (the bytes a port of the spec must produce)")
    else:
        print(f"bytes: not compared with the conformance vector, which pins seed 0 (this run: seed {args.seed})")

    resume_at = args.steps // 2
    with loader.iter(0, resume_at) as first_half:
        for batch in first_half:
            batch.close()
        checkpoint = first_half.state_dict()
    with loader.iter(state=checkpoint, stop_g=args.steps) as resumed:
        for g, batch in zip(range(resume_at, args.steps), resumed):
            with batch:
                if batch_digest(batch.as_dict()) != digests[g]:
                    print(f"MISMATCH: resumed global step {g} differs from the uninterrupted run")
                    return 1
    print(f"resume: a run stopped at step {resume_at} and resumed from its checkpoint gave the remaining "
          f"{args.steps - resume_at} batches bit for bit")
    loader.close()
    checked = "the same bytes as the vector and after a resume" if args.seed == 0 else "the same bytes after a resume"
    print(f"OK: {rate * DEMO_BATCH:,.0f} images/s, {checked}")
    return 0


def add_demo_parser(commands) -> None:
    demo = commands.add_parser("demo", help="run the §7 workload on built-in synthetic data",
                               description=DEMO_DESCRIPTION)
    demo.add_argument("--steps", type=int, default=500,
                      help="global steps per pass, at least 2 (default: %(default)s)")
    demo.add_argument("--workers", type=int, default=2,
                      help="loader worker threads; 0 builds on the calling thread (default: %(default)s)")
    demo.add_argument("--seed", type=int, default=0,
                      help="seed of the data, the shuffle and the augmentation (default: %(default)s)")


def run_demo(parser, args) -> int:
    """Check demo's numbers (argparse's exit status 2 on a bad one), then run it."""
    if args.steps < 2 or args.workers < 0:
        parser.error(f"demo needs --steps >= 2 and --workers >= 0, received --steps {args.steps} "
                     f"--workers {args.workers}")
    return _demo(args)
