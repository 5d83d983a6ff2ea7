"""``onemodel-cy show``: its options, their defaults (which differ with ``--augment``), and
the dataset it draws from; the pictures themselves are ``onemodel_cy.show``'s."""
from __future__ import annotations

import sys

from onemodel_cy.cli.errors import USAGE, user_error

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


def add_show_parser(commands) -> None:
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


def run_show(parser, args) -> int:
    _show_arguments(parser, args)
    return _show(args)
