"""``onemodel-cy`` / ``python -m onemodel_cy``: the demo job and the conformance suite.

The benchmark harness is not part of the installed package: it lives in ``benchmarks/`` of
a source checkout, and ``onemodel-cy bench`` only says how to run it.

A user's error (a missing folder, a bad labels file, an existing output) is one line on
stderr, ``onemodel-cy: error: <message>`` naming the file, and exit status 2 for the
command line (as argparse) or 1 for the data; an unexpected exception keeps its traceback.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

USAGE, DATA = 2, 1          # exit statuses: a bad command line (argparse's), bad data


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


AUGMENT_TEXTLINES = dict(height=32, min_length=4, max_length=6, scale=3, noise=0.0)   # show --augment's lines


def _show_dataset(args, om, needed, option):
    """The dataset ``show`` draws from, or the exit status of a one-line error (a pack that
    cannot be read, or holds fewer than ``needed`` samples, ``option`` naming the count)."""
    if args.pack is not None:
        from onemodel_cy.data.packs.format import read_manifest
        try:
            # The picture scales the pixels to a min..max: any §6 mean and std draw the same, so
            # 8-bit packs are opened at mean 0, std 1 (pixels in [0, 1], as the augmentations expect).
            float32 = read_manifest(args.pack)["pixels"] == "float32"
            dataset = om.PackedImageDataset(args.pack, None if float32 else 0.0, None if float32 else 1.0)
        except (ValueError, OSError) as error:      # a PackError names the folder and the file
            return user_error(error, USAGE)
        if len(dataset) < needed:
            return user_error(f"{args.pack}: {len(dataset)} samples, fewer than {option} {needed}", USAGE)
        return dataset
    if args.dataset == "textlines":
        if args.augment:        # larger, clean glyphs: what each operation does shows
            return om.SyntheticTextLines(args.count, seed=args.seed, **AUGMENT_TEXTLINES)
        return om.SyntheticTextLines(args.count, seed=args.seed)
    return om.SyntheticLineImages(args.count, height=32, min_width=64, max_width=256, seed=args.seed)


def _show(args) -> int:
    """Render the batches of global steps g .. g+steps-1 of a small pipeline to a PNG, or
    (--augment) a few lines before and after the built-in augmentations."""
    import onemodel_cy as om

    if args.augment:
        return _show_augment(args, om)
    from onemodel_cy.show import save_steps
    dataset = _show_dataset(args, om, args.batch_size, "--batch-size")
    if isinstance(dataset, int):
        return dataset
    sampler = om.ShuffledSampler(len(dataset), args.batch_size, seed=args.seed)
    collator = om.ImageBatchCollator(width_multiple=args.width_multiple)
    loader = om.DataLoader(dataset, sampler, collator, seed=args.seed)
    try:
        width, height = save_steps(loader, args.g, args.steps, args.out, zoom=args.zoom)
    except ImportError as error:         # Pillow missing: say how to get it, without a traceback
        print(f"onemodel-cy show: {error}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} ({width}x{height} px): global steps {args.g}..{args.g + args.steps - 1} of "
          f"{args.pack if args.pack is not None else type(dataset).__name__}, {args.batch_size} images each, "
          f"padding hatched in magenta")
    return 0


def _show_augment(args, om) -> int:
    """Lines 0 .. lines-1 of the dataset: the originals, the preset text_lines() at steps
    g .. g+steps-1, and each operation of show.AUGMENT_OPS alone (docs/augment.md)."""
    try:
        from onemodel_cy.show import AUGMENT_OPS, save_augment
        dataset = _show_dataset(args, om, args.lines, "--lines")
        if isinstance(dataset, int):
            return dataset
        lines = [dataset.get_sample(k).image for k in range(args.lines)]
        source = args.pack if args.pack is not None else type(dataset).__name__
        width, height = save_augment(lines, args.out, seed=args.seed, first_step=args.g, steps=args.steps,
                                     zoom=args.zoom, title=f"{args.lines} lines of {source}")
    except ImportError as error:         # Pillow missing: say how to get it, without a traceback
        print(f"onemodel-cy show: {error}", file=sys.stderr)
        return 2
    preset = f"text_lines() at steps {args.g}..{args.g + args.steps - 1}" if args.steps else "no preset row"
    print(f"wrote {args.out} ({width}x{height} px): {args.lines} lines of {source}, the originals, {preset} "
          f"and {len(AUGMENT_OPS)} operations alone")
    return 0


def _add_show(commands):
    show = commands.add_parser("show", help="render batches to a PNG, padding marked (needs Pillow: the show extra)",
                               description="Render the batches of global steps g..g+steps-1 to a PNG: each image "
                                           "with its padding hatched in magenta, its width, target (through the "
                                           "dataset's vocabulary), label and dataset index. With --augment, "
                                           "draw a few lines instead: as they are, after the preset "
                                           "onemodel_cy.augment.text_lines() at steps g..g+steps-1, and after "
                                           "each operation alone at a low and a high magnitude "
                                           "(docs/augment.md).")
    show.add_argument("--out", default=None, help="the PNG to write (default batch.png, or augment.png)")
    show.add_argument("--augment", action="store_true",
                      help="draw lines before and after the built-in augmentations instead of batches")
    show.add_argument("--dataset", choices=["textlines", "lines"], default="textlines",
                      help="SyntheticTextLines (default; with --augment at height 32, glyph scale 3, no noise) "
                           "or SyntheticLineImages")
    show.add_argument("--pack", metavar="PATH", default=None,
                      help="show a pack instead (its file names and texts beside each image)")
    show.add_argument("--g", type=int, default=0, help="first global step (default 0)")
    show.add_argument("--steps", type=int, default=None,
                      help="how many steps: batches (default 1), or with --augment rows of the preset (default 3)")
    show.add_argument("--batch-size", type=int, default=None, help="images per batch (default 6)")
    show.add_argument("--lines", type=int, default=None,
                      help="with --augment: how many lines, the dataset's first (default 3)")
    show.add_argument("--count", type=int, default=256, help="dataset size (default 256; not with --pack)")
    show.add_argument("--seed", type=int, default=0, help="dataset, sampler and loader seed (default 0)")
    show.add_argument("--width-multiple", type=int, default=None, help="collator width multiple (default 8)")
    show.add_argument("--zoom", type=int, default=None,
                      help="figure pixels per image pixel (default 3; 2 with --augment)")


def _show_arguments(parser, args):
    """Fill in show's defaults (they differ with --augment), or exit with argparse's status 2."""
    if args.augment:
        given = [name for name, value in (("--batch-size", args.batch_size),
                                          ("--width-multiple", args.width_multiple)) if value is not None]
        if given:
            parser.error(f"show --augment draws lines, not batches: {' and '.join(given)} "
                         f"{'does' if len(given) == 1 else 'do'} not apply "
                         f"(--lines sets how many lines)")
        args.lines = 3 if args.lines is None else args.lines
        args.steps = 3 if args.steps is None else args.steps
        args.zoom = 2 if args.zoom is None else args.zoom
        args.out = "augment.png" if args.out is None else args.out
        most = 64 if args.pack is not None else min(64, args.count)
        if args.g < 0 or not 0 <= args.steps <= 64 or not 1 <= args.lines <= most or not 1 <= args.zoom <= 32:
            parser.error(f"show --augment needs --g >= 0, 0 <= --steps <= 64, 1 <= --lines <= 64 (and <= --count) "
                         f"and 1 <= --zoom <= 32, received --g {args.g} --steps {args.steps} --lines {args.lines} "
                         f"--count {args.count} --zoom {args.zoom}")
        return
    if args.lines is not None:
        parser.error("--lines is an option of show --augment (batches take --batch-size)")
    args.steps = 1 if args.steps is None else args.steps
    args.batch_size = 6 if args.batch_size is None else args.batch_size
    args.width_multiple = 8 if args.width_multiple is None else args.width_multiple
    args.zoom = 3 if args.zoom is None else args.zoom
    args.out = "batch.png" if args.out is None else args.out
    if args.g < 0 or args.steps < 1 or args.batch_size < 1 or args.count < args.batch_size or not 1 <= args.zoom <= 32:
        parser.error(f"show needs --g >= 0, --steps >= 1, 1 <= --batch-size <= --count and 1 <= --zoom <= 32, "
                     f"received --g {args.g} --steps {args.steps} --batch-size {args.batch_size} "
                     f"--count {args.count} --zoom {args.zoom}")


BENCH_HOWTO = """The benchmarks are not installed with the package. In a source checkout, with the package
importable from it (pip install -e . there, or python setup.py build_ext --inplace and
PYTHONPATH=.), run:

  python benchmarks/bench_loader.py{args}
      the §7 workload: memory floor, this loader, the training-loop patterns, peers
      (--help lists --quick, --only loader|epochs|fresh|peers|scaling, --out)
  python benchmarks/bench_collate.py
      §4/§5 collation on one thread
  python benchmarks/bench_rng.py
      §2/§3 micro-benchmarks"""


def _bench(argv) -> int:
    """Say how to run the benchmark harness (it lives in the checkout, not in the package)."""
    print(BENCH_HOWTO.format(args="".join(f" {a}" for a in argv)))
    return 0


def add_pack_parser(commands) -> None:
    pack = commands.add_parser("pack", help="decode line images (a folder, an LMDB, Parquet files, WebDataset "
                                            "tars) once into a pack (docs/packed-format.md) for PackedImageDataset")
    pack.add_argument("source", metavar="SOURCE",
                      help="the folder of image files, or with --from: the LMDB (its folder), the Parquet file "
                           "(or a folder of them), the WebDataset tar (or a folder of them)")
    pack.add_argument("out", help="the pack's folder (must not exist unless --overwrite)")
    pack.add_argument("--from", dest="source_format", choices=("folder", *CONTAINER_OPTIONS), default="folder",
                      help="what SOURCE is (default: folder, with --labels)")
    pack.add_argument("--labels", help="with --from folder: UTF-8 file of 'file name<TAB>text' lines")
    source = pack.add_argument_group("container layouts (defaults: deep-text-recognition-benchmark's LMDB, "
                                     "Hugging Face Parquet, WebDataset)")
    source.add_argument("--image-key", help="lmdb: the image keys, a %%d pattern of the record number "
                                            "(default image-%%09d)")
    source.add_argument("--label-key", help="lmdb: the text keys (default label-%%09d)")
    source.add_argument("--count-key", help="lmdb: the key of the number of records (default num-samples)")
    source.add_argument("--first", type=int, help="lmdb: the number of the first record (default 1)")
    source.add_argument("--image-column", help="parquet: the column of encoded images, bytes or "
                                               "{bytes, path} (default image)")
    source.add_argument("--text-column", help="parquet: the column of texts (default text)")
    source.add_argument("--key-column", help="parquet: a string column of keys (default: the row number)")
    source.add_argument("--image-ext", help="webdataset: the image extensions, comma-separated, the first "
                                            "present taken (default png,jpg,jpeg)")
    source.add_argument("--text-ext", help="webdataset: the text's extension (default txt)")
    pack.add_argument("--height", type=int, default=32,
                      help="resize every line to this height, its aspect ratio kept (default 32)")
    pack.add_argument("--mode", choices=("L", "RGB"), default="L",
                      help="8-bit grey (L: a colour line becomes grey) or RGB pixels (default L)")
    pack.add_argument("--max-width", type=int, default=None, metavar="W",
                      help="the widest line packed, once fitted to the height (default: no limit)")
    pack.add_argument("--too-wide", choices=("downscale", "skip"), default="downscale",
                      help="a line wider than --max-width: narrowed to it, its height kept (downscale, the "
                           "default), or not packed and listed (skip)")
    ids = pack.add_mutually_exclusive_group()
    ids.add_argument("--vocabulary", metavar="TEXT|FILE",
                     help="the symbols of target ids 1, 2, ...: the characters of TEXT, or of FILE's one line "
                          "(default: every character of the labels, sorted)")
    ids.add_argument("--vocabulary-from", metavar="PACK",
                     help="the vocabulary of another pack, so that both give each symbol the same id "
                          "(train and test packs)")
    pack.add_argument("--workers", type=int, default=None, help="decoding threads (default: CPUs)")
    pack.add_argument("--shards", type=int, default=None, metavar="N",
                      help="write a sharded pack of N shards, one per partition of the source's records "
                           "(default: a plain pack)")
    pack.add_argument("--engine", choices=("local", "dask"), default="local",
                      help="where the shard tasks run: one after another here (local), or on Dask (the "
                           "distributed extra): a local cluster of --engine-workers processes, or --scheduler's")
    pack.add_argument("--engine-workers", type=int, default=None, metavar="K",
                      help="processes of Dask's local cluster (default: CPUs); --workers is then the decoding "
                           "threads of each task (default 1)")
    pack.add_argument("--scheduler", metavar="ADDRESS", default=None,
                      help="run the shard tasks on the Dask cluster of this scheduler (tcp://host:port); its workers "
                           "must see SOURCE and OUT at the same paths")
    pack.add_argument("--overwrite", action="store_true", help="replace OUT once the new pack is complete")
    pack.add_argument("--no-progress", action="store_true", help="no progress bar")


def user_error(message, status: int) -> int:
    print(f"onemodel-cy: error: {message}", file=sys.stderr)
    return status


def _pack(args) -> int:
    from onemodel_cy.data.packs.writer import pack
    from onemodel_cy.data.packs.format import INT32_END
    from onemodel_cy.data.packs.sharded import pack_sharded
    # What the command line names is checked first (status 2); what is in the files, while packing (1).
    source = _source_argument(args)
    if isinstance(source, int):
        return source
    if os.path.lexists(args.out) and not args.overwrite:
        return user_error(f"{args.out}: already exists (pass --overwrite to replace it)", USAGE)
    if not 1 <= args.height < INT32_END:
        return user_error(f"--height must be an integer in [1, 2**31), received {args.height}", USAGE)
    if args.max_width is not None and not 1 <= args.max_width < INT32_END:
        return user_error(f"--max-width must be an integer in [1, 2**31), received {args.max_width}", USAGE)
    if args.workers is not None and args.workers < 1:
        return user_error(f"--workers must be an integer >= 1, received {args.workers}", USAGE)
    engine = _engine_argument(args)
    if isinstance(engine, int):
        return engine
    try:
        vocabulary = _vocabulary_argument(args)
    except (ValueError, OSError) as error:
        return user_error(error, USAGE)
    try:
        common = dict(labels=args.labels, height=args.height, mode=args.mode, max_width=args.max_width,
                      too_wide=args.too_wide, vocabulary=vocabulary,
                      workers=args.workers, progress=not args.no_progress, overwrite=args.overwrite)
        if args.shards is None:
            report = pack(source, args.out, **common)
        else:
            report = pack_sharded(source, args.out, shards=args.shards, engine=engine,
                                  engine_workers=args.engine_workers, **common)
    except FileExistsError as error:        # another writer published OUT meanwhile
        return user_error(error, USAGE)
    except ImportError as error:            # Pillow or dask missing: say how to get it (as `show`)
        return user_error(error, USAGE)
    # With the arguments checked, a ValueError is about the data: a PackError naming the
    # labels file and its line, nothing left to pack, more shards than lines; an OSError
    # names its file (a full disk); a RuntimeError, a shard task that ended its worker.
    except (ValueError, OSError) as error:
        return user_error(error, DATA)
    except RuntimeError as error:
        if engine == "local":
            raise
        return user_error(error, DATA)
    print(report.summary())
    return 0


# ``pack --from``: each container's options, as the command line and the class name them.
CONTAINER_OPTIONS = {"lmdb": ("image_key", "label_key", "count_key", "first"),
                     "parquet": ("image_column", "text_column", "key_column"),
                     "webdataset": ("image_ext", "text_ext")}


def _source_argument(args):
    """``pack``'s source for SOURCE and ``--from`` (the folder's path, or a container), or
    the exit status of a one-line error about them."""
    given = {name for names in CONTAINER_OPTIONS.values() for name in names if getattr(args, name) is not None}
    if args.source_format == "folder":
        if given:
            return user_error(f"--{sorted(given)[0].replace('_', '-')} is an option of --from "
                              f"{next(f for f, names in CONTAINER_OPTIONS.items() if sorted(given)[0] in names)}",
                              USAGE)
        if not os.path.isdir(args.source):
            return user_error(f"{args.source}: {'not a folder' if os.path.exists(args.source) else 'no such folder'}"
                              f" (SOURCE is the folder of image files)", USAGE)
        if args.labels is None:
            return user_error("--labels is required with a folder of images (--from folder)", USAGE)
        if not os.path.isfile(args.labels):
            return user_error(f"{args.labels}: {'not a file' if os.path.exists(args.labels) else 'no such file'} "
                              f"(--labels is a UTF-8 file of 'file name<TAB>text' lines)", USAGE)
        return args.source
    from onemodel_cy.data.packs.containers import FORMATS
    if args.labels is not None:
        return user_error(f"--labels is the labels file of a folder; --from {args.source_format} holds its texts",
                          USAGE)
    other = sorted(given - set(CONTAINER_OPTIONS[args.source_format]))
    if other:
        return user_error(f"--{other[0].replace('_', '-')} is not an option of --from {args.source_format}", USAGE)
    if not os.path.exists(args.source):
        return user_error(f"{args.source}: no such file or folder (SOURCE, --from {args.source_format})", USAGE)
    options = {name: getattr(args, name) for name in given}
    if "image_ext" in options:
        options["image_extensions"] = tuple(e.strip() for e in options.pop("image_ext").split(","))
    if "text_ext" in options:
        options["text_extension"] = options.pop("text_ext")
    try:
        return FORMATS[args.source_format](args.source, **options)
    except ValueError as error:
        return user_error(error, USAGE)


def _engine_argument(args):
    """``pack``'s ``engine`` for ``--engine``/``--scheduler``, or the exit status of a one-line
    error about them (the shard options go together: an engine writes a sharded pack)."""
    if args.shards is not None and args.shards < 1:
        return user_error(f"--shards must be an integer >= 1, received {args.shards}", USAGE)
    if args.engine == "dask" and args.shards is None:
        return user_error("--engine dask writes a sharded pack: give --shards N", USAGE)
    if args.engine != "dask" and (args.engine_workers is not None or args.scheduler is not None):
        return user_error("--engine-workers and --scheduler are options of --engine dask", USAGE)
    if args.engine_workers is not None and args.scheduler is not None:
        return user_error("--engine-workers starts a local cluster, --scheduler uses another: give one of them",
                          USAGE)
    if args.engine_workers is not None and args.engine_workers < 1:
        return user_error(f"--engine-workers must be an integer >= 1, received {args.engine_workers}", USAGE)
    if args.scheduler is not None and "://" not in args.scheduler:
        return user_error(f"--scheduler must be a Dask scheduler's address (tcp://host:port), received "
                          f"{args.scheduler!r}", USAGE)
    return args.scheduler if args.scheduler is not None else args.engine


def _vocabulary_argument(args):
    """The vocabulary ``--vocabulary`` or ``--vocabulary-from`` names (None: from the labels)."""
    if args.vocabulary_from is not None:
        from onemodel_cy.data.packs.format import read_manifest
        vocabulary = read_manifest(args.vocabulary_from).get("vocabulary")     # the symbols of ids 1, 2, ...
        if vocabulary is None:
            raise ValueError(f"{args.vocabulary_from}: this pack has no vocabulary (it was not written from text) "
                             f"(--vocabulary-from)")
        return vocabulary
    if args.vocabulary is None:
        return None
    text = args.vocabulary
    if os.path.isfile(text):
        with open(text, encoding="utf-8") as file:
            text = file.read().rstrip("\r\n")
        if "\n" in text:
            raise ValueError(f"{args.vocabulary}: a vocabulary file holds one line, its symbols in id order "
                             f"(--vocabulary)")
    from onemodel_cy.data.vocabulary import Vocabulary
    try:
        if not text:
            raise ValueError
        return Vocabulary(text)
    except ValueError:
        raise ValueError(f"--vocabulary must be distinct characters (ids 1, 2, ... in order), received "
                         f"{text!r}") from None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # `bench` and `conformance` own their options: hand them the rest of the line.
    if argv and argv[0] == "bench":
        return _bench(argv[1:])
    if argv and argv[0] == "conformance":
        from onemodel_cy.conformance.checker import main as conformance_main
        return conformance_main(argv[1:])

    parser = argparse.ArgumentParser(prog="onemodel-cy", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the §7 workload on built-in synthetic data",
                               description=DEMO_DESCRIPTION)
    demo.add_argument("--steps", type=int, default=500,
                      help="global steps per pass, at least 2 (default: %(default)s)")
    demo.add_argument("--workers", type=int, default=2,
                      help="loader worker threads; 0 builds on the calling thread (default: %(default)s)")
    demo.add_argument("--seed", type=int, default=0,
                      help="seed of the data, the shuffle and the augmentation (default: %(default)s)")
    commands.add_parser("bench", help="how to run the benchmarks from a source checkout")
    commands.add_parser("conformance", help="known-answer vectors for ports, and the checker (--help)")
    add_pack_parser(commands)
    _add_show(commands)
    args = parser.parse_args(argv)
    if args.command == "pack":
        return _pack(args)
    if args.command == "show":
        _show_arguments(parser, args)
        return _show(args)
    if args.steps < 2 or args.workers < 0:
        parser.error(f"demo needs --steps >= 2 and --workers >= 0, received --steps {args.steps} "
                     f"--workers {args.workers}")
    return _demo(args)


if __name__ == "__main__":
    sys.exit(main())
