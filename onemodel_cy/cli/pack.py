"""``onemodel-cy pack``: its options, their checks (a bad command line is exit status 2,
bad data 1, as ``onemodel_cy.cli``'s docstring says) and the call to the writer."""
from __future__ import annotations

import os

from onemodel_cy.cli.errors import DATA, USAGE, user_error

# ``pack --from``: each container's options, as the command line and the class name them.
CONTAINER_OPTIONS = {"lmdb": ("image_key", "label_key", "count_key", "first"),
                     "parquet": ("image_column", "text_column", "key_column"),
                     "webdataset": ("image_ext", "text_ext")}


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


def run_pack(args) -> int:
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
