"""``onemodel-cy`` / ``python -m onemodel_cy``: the demo job, benchmarks and the conformance suite."""
from __future__ import annotations

import argparse
import hashlib
import sys
import time


def _demo(args) -> int:
    """Feed the §7 workload through the loader, then prove that a resumed run matches."""
    import onemodel_cy as om

    dataset = om.SyntheticLineImages(2048, height=32, min_width=64, max_width=256, seed=args.seed)
    sampler = om.ShuffledSampler(len(dataset), 128, seed=args.seed)
    collator = om.ImageBatchCollator(width_multiple=4, augmentation=om.GainOffset())
    loader = om.DataLoader(dataset, sampler, collator, seed=args.seed, workers=args.workers, prefetch=8)
    print(f"{loader!r}")
    digest = hashlib.sha256()
    digests = []
    start = time.perf_counter()
    with loader.iter(0, args.steps) as stream:
        for batch in stream:
            with batch:
                step_digest = hashlib.sha256(batch.images.tobytes()).hexdigest()
                digests.append(step_digest)
                digest.update(step_digest.encode())
    elapsed = time.perf_counter() - start
    print(f"{args.steps} batches of 128 images in {elapsed:.2f} s: {args.steps / elapsed:,.0f} batches/s "
          f"with {args.workers} worker threads (digests included)")
    resume_at = args.steps // 2
    with loader.iter(resume_at, args.steps) as resumed:
        for step, batch in zip(range(resume_at, args.steps), resumed):
            with batch:
                if hashlib.sha256(batch.images.tobytes()).hexdigest() != digests[step]:
                    print(f"MISMATCH: resumed step {step} differs from the uninterrupted run")
                    return 1
    print(f"resumed at step {resume_at}: the remaining {args.steps - resume_at} batches match bit for bit")
    print(f"stream digest: {digest.hexdigest()}")
    print(f"pool: {collator.pool.stats()}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="onemodel-cy", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="run the §7 workload on built-in synthetic data")
    demo.add_argument("--steps", type=int, default=500)
    demo.add_argument("--workers", type=int, default=2)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(run=_demo)

    bench = commands.add_parser("bench", help="benchmark the loader against the memory floor and peers")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the benchmark (see --help)")
    bench.set_defaults(run=lambda a: __import__("onemodel_cy.bench", fromlist=["main"]).main(a.args))

    conformance = commands.add_parser("conformance", help="known-answer vectors for ports")
    conformance.add_argument("args", nargs=argparse.REMAINDER)
    conformance.set_defaults(
        run=lambda a: __import__("onemodel_cy.conformance", fromlist=["main"]).main(a.args))

    args = parser.parse_args(argv)
    if args.command == "demo" and (args.steps < 2 or args.workers < 0):
        parser.error(f"demo needs --steps >= 2 and --workers >= 0, received --steps {args.steps} "
                     f"--workers {args.workers}")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
