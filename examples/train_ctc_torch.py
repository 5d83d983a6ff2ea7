"""Train a CRNN with CTC on the CPU, from built-in lines or from packs, and resume it bit for bit.

    python examples/train_ctc_torch.py                       # built-in digit lines, held-out CER
    python examples/train_ctc_torch.py --train-pack train.pack --test-pack test.pack --checkpoint run.pt
    python examples/train_ctc_torch.py --train-pack train.pack --test-pack test.pack --checkpoint run.pt \\
        --stop-at 1000                                       # stop after step 999 ...
    python examples/train_ctc_torch.py --resume run.pt       # ... and go on, in a new process

Data: ``onemodel_cy.DataLoader`` with worker threads, batches of lines of similar widths
(``BucketedSampler`` over the dataset's widths, pools of ``POOL_BATCHES`` batches; the
fraction of each batch's pixels that is padding is printed), padded to a width multiple of
4, augmented for training by ``onemodel_cy.augment.text_lines()`` (``--no-augment`` turns
it off; the held-out set is never augmented). By default lines of 1 to 5 digits
(``SyntheticTextLines``, 20 pixels high); with ``--train-pack`` and ``--test-pack`` the lines
of packs written by ``onemodel-cy pack`` (the test pack with ``--vocabulary-from`` the train
pack; 8-bit pixels are read with §6 ``--mean`` and ``--std``).

Model (``model_config``): three conv blocks that halve the height and width twice and the
height once more, a fourth conv block, the remaining rows flattened into one vector per
4 pixels of width, a linear projection, a two-layer bidirectional LSTM over the frames
(packed, so padding is never read) and a linear layer over the classes of the dataset's
``vocabulary`` (the CTC blank first). Its size follows the vocabulary: ``hidden`` is the
class count rounded up to a power of two, within 64..256 (``--hidden`` sets it), the conv
widths are hidden/8, hidden/4, hidden/2, hidden/2; the height sets the flattened rows
(height // 8). For 66 symbols at height 32: hidden 128, about 0.8 M parameters. Trained with
``torch.nn.CTCLoss``, AdamW, gradient norm clipped at 5 and a one-cycle learning-rate
schedule over ``--steps``.

Every ``--eval-every`` steps and at the end it decodes the held-out set greedily and prints
the character error rate (edit distance / target characters) and one decoded line; a
progress bar (tqdm, when installed and the output is a terminal) or a line every
``--log-every`` steps shows the loss, the learning rate, the padding and the speed.

The checkpoint (``torch.save``: ``--checkpoint``, written at ``--stop-at`` and at the end)
holds the model, optimizer, schedule, torch's RNG state and the loader's resume state, and
what the run was: its settings (every option that changes the numbers), the model's
configuration and its data (each pack by its content fingerprint, its path as a hint). So
``--resume run.pt`` alone goes on where it stopped, with the same packs (opened from the
recorded paths, or from ``--train-pack``/``--test-pack`` when they moved), and refuses,
naming both, a pack whose content is not the recorded one, or a setting given that differs.
It also keeps the vocabulary's symbols (``om.Vocabulary``: what the model's classes 1, 2,
... read as), for whoever decodes with the model later.
Because batch ``g`` is a pure function of ``(seed, g)`` (§1) and torch runs
deterministically here (``torch.manual_seed``, ``torch.use_deterministic_algorithms(True)``,
a fixed ``--threads``), the losses after the stop are the uninterrupted run's bit for bit;
``--losses-out FILE`` writes each step's loss as ``float.hex``
(``spec_tests/test_api_train_example.py``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import onemodel_cy as om
from onemodel_cy import augment
from onemodel_cy.interop import to_torch

HEIGHT, MAX_LENGTH, NUM_SYMBOLS, SCALE, NOISE = 20, 5, 10, 2, 0.5
DOWNSAMPLE = 4          # the model's width stride: one output frame per 4 pixels
POOL_BATCHES = 16       # BucketedSampler: lines sorted by width in pools of 16 batches
EVAL_BATCH = 64
FORMAT = "train_ctc_torch/2"

# The options that change the numbers a run computes: a checkpoint records them, --resume
# takes them from it, and one given anew must agree. Their defaults (None: chosen from the data).
SETTINGS = dict(steps=None, batch_size=32, lr=None, seed=0, threads=2, augment=True, bucket=True, hidden=None,
                train_size=12800, eval_size=1000, train_pack=None, test_pack=None, mean=0.5, std=0.25,
                zero_images=False)
PACK_STEPS, BUILTIN_STEPS = 1000, 400
PACK_LR, BUILTIN_LR = 2e-3, 2e-3


# -- data ------------------------------------------------------------------------------

def make_dataset(count, seed):
    return om.SyntheticTextLines(count, height=HEIGHT, min_length=1, max_length=MAX_LENGTH,
                                 num_symbols=NUM_SYMBOLS, scale=SCALE, noise=NOISE, seed=seed)


def open_pack(path, mean, std):
    """A pack written from text, at one height (as ``onemodel-cy pack`` writes them)."""
    try:        # the manifest's "pixels" (docs/packed-format.md): a float32 pack is served as stored
        with open(os.path.join(path, "manifest.json"), encoding="utf-8") as manifest:
            float32 = json.load(manifest).get("pixels") == "float32"      # no §6 constants
    except (OSError, ValueError):
        float32 = False             # not a readable pack: PackedImageDataset says what is wrong
    dataset = om.PackedImageDataset(path, None if float32 else mean, None if float32 else std)
    if dataset.vocabulary is None:
        raise SystemExit(f"{path}: this pack has no vocabulary (it was not written from text)")
    if len(set(dataset.shapes[:, 1].tolist())) != 1:
        raise SystemExit(f"{path}: its lines have several heights; write it with onemodel-cy pack --height")
    return dataset


def make_datasets(args):
    """The training and held-out datasets, and their (channels, height)."""
    if args.train_pack is None:
        return make_dataset(args.train_size, args.seed), make_dataset(args.eval_size, args.seed + 1), (1, HEIGHT)
    train = open_pack(args.train_pack, args.mean, args.std)
    held_out = train if args.test_pack is None else open_pack(args.test_pack, args.mean, args.std)
    try:
        om.check_same(train, held_out)
    except ValueError as error:
        raise SystemExit(f"{args.test_pack}: {error}") from None
    if held_out.shapes[0, :2].tolist() != train.shapes[0, :2].tolist():
        raise SystemExit(f"{args.test_pack}: lines of {held_out.shapes[0, :2].tolist()} (channels, height), "
                         f"the train pack's are {train.shapes[0, :2].tolist()}")
    return train, held_out, tuple(train.shapes[0, :2].tolist())


class WidthOrder(om.Sampler):
    """Evaluation order: every line once, sorted by width, in batches of ``batch_size`` (the
    last one shorter), so that held-out batches are barely padded."""

    def __init__(self, widths, batch_size):
        self.order = np.argsort(np.asarray(widths), kind="stable")
        self.batch_size = batch_size
        self.steps_per_epoch = -(-len(self.order) // batch_size)

    def indices(self, epoch, step):
        return self.order[step * self.batch_size:(step + 1) * self.batch_size]


def make_loader(dataset, batch_size, seed, workers, shuffle=True, augmented=False, bucket=True):
    """Training (``shuffle``): width buckets (or plain shuffling), the ``text_lines()``
    augmentation when ``augmented``; held out: every line once, in width order."""
    if not shuffle:
        sampler = WidthOrder(dataset.widths, batch_size)
    elif bucket:
        sampler = om.BucketedSampler(dataset.widths, batch_size, POOL_BATCHES, seed)
    else:
        sampler = om.ShuffledSampler(len(dataset), batch_size, seed=seed)
    collator = om.ImageBatchCollator(width_multiple=DOWNSAMPLE)
    transform = augment.text_lines() if augmented else None
    return om.DataLoader(dataset, sampler, collator, seed=seed, workers=workers, prefetch=4, transform=transform,
                         worker_mode="thread")


def padding_fraction(sampler, widths, steps):
    """The share of padding in the first ``steps`` batches of ``sampler`` (before any augmentation)."""
    padded = real = 0
    for step in range(min(steps, sampler.steps_per_epoch)):
        w = widths[np.asarray(sampler.indices(0, step))]
        padded += len(w) * -(-int(w.max()) // DOWNSAMPLE) * DOWNSAMPLE
        real += int(w.sum())
    return 1 - real / padded


# The loader's resume state: the stream's state_dict() (the next global step and the
# pipeline's fingerprint), resumed with loader.iter(state=...), which checks the pipeline.
def loader_state(stream):
    """What a checkpoint keeps of the loader: the next global step and the pipeline's fingerprint."""
    return stream.state_dict()


def resume_stream(loader, state, stop_g):
    """A stream that goes on at ``state`` (refused if the pipeline differs from the saved one:
    ``iter(state=...)`` is the checked way to resume)."""
    if state is None:
        return loader.iter(0, stop_g)
    return loader.iter(state=state, stop_g=stop_g)


# -- model -----------------------------------------------------------------------------

def model_config(classes, in_channels, height, hidden=None):
    """The CRNN's size from the vocabulary (``classes``) and the line height."""
    if height < 8:
        raise SystemExit(f"lines of height {height}: the model needs at least 8 rows")
    if hidden is None:
        hidden = min(256, max(64, 1 << (classes - 1).bit_length()))
    return {"classes": classes, "in_channels": in_channels, "height": height, "hidden": hidden, "layers": 2,
            "channels": [max(8, hidden // 8), hidden // 4, hidden // 2, hidden // 2]}


def conv_block(c_in, c_out, pool):
    layers = [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True)]
    return layers + ([nn.MaxPool2d(pool)] if pool else [])


class CRNN(nn.Module):
    """Conv blocks (height / 8, width / 4), the rows flattened per frame, a BiLSTM, per-frame logits."""

    def __init__(self, config):
        super().__init__()
        c1, c2, c3, c4 = config["channels"]
        hidden = config["hidden"]
        self.features = nn.Sequential(*conv_block(config["in_channels"], c1, 2), *conv_block(c1, c2, 2),
                                      *conv_block(c2, c3, None), *conv_block(c3, c4, (2, 1)))
        self.project = nn.Linear(c4 * (config["height"] // 8), hidden)
        self.rnn = nn.LSTM(hidden, hidden, num_layers=config["layers"], bidirectional=True, batch_first=True)
        self.head = nn.Linear(2 * hidden, config["classes"])
        # A shortcut from the conv features to the logits: CTC leaves its all-blank start
        # within about a hundred steps through it, where the LSTM alone takes many hundreds.
        self.shortcut = nn.Linear(hidden, config["classes"])

    def forward(self, images, frame_lengths):
        x = self.features(images)                                  # [B, C, H/8, W/4]
        b, c, h, w = x.shape
        x = self.project(x.permute(0, 3, 1, 2).reshape(b, w, c * h))
        packed = pack_padded_sequence(x, frame_lengths, batch_first=True, enforce_sorted=False)
        y, _ = pad_packed_sequence(self.rnn(packed)[0], batch_first=True, total_length=w)
        return self.head(y) + self.shortcut(x)                     # [B, T, classes]


def ctc_inputs(tensors):
    """The padded batch as CTC wants it: images, flat targets and both length vectors."""
    images = tensors["images"]
    frames = (tensors["widths"].long() + DOWNSAMPLE - 1) // DOWNSAMPLE     # frames of each line's real width
    return images, tensors["targets"].long(), frames, tensors["target_lengths"].long()


# -- evaluation -------------------------------------------------------------------------

def greedy_decode(logits, frame_lengths):
    """Best path: the most likely class per frame, repeats merged, blanks (``om.BLANK_ID``) dropped."""
    best = logits.argmax(-1)
    out = []
    for row, n in zip(best.tolist(), frame_lengths.tolist()):
        seq, previous = [], om.BLANK_ID
        for c in row[:n]:
            if c != previous and c != om.BLANK_ID:
                seq.append(c)
            previous = c
        out.append(seq)
    return out


def edit_distance(a, b):
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (x != y))
    return row[-1]


def character_error_rate(model, loader):
    """Held-out CER: total edit distance over total target characters; and the line of
    dataset index 0 as ``(truth, prediction)`` text (the dataset's ``Vocabulary``)."""
    model.eval()
    errors = total = 0
    example = None
    with torch.no_grad(), loader.iter(0, len(loader)) as stream:
        for batch in stream:
            with batch:
                tensors = to_torch(batch)
                images, targets, frames, lengths = ctc_inputs(tensors)
                decoded = greedy_decode(model(images, frames), frames)
                offsets = [0] + torch.cumsum(lengths, 0).tolist()
                for k, (seq, index) in enumerate(zip(decoded, batch.indices.tolist())):
                    truth = targets[offsets[k]:offsets[k + 1]].tolist()
                    errors += edit_distance(seq, truth)
                    total += len(truth)
                    if index == 0:
                        vocabulary = loader.dataset.vocabulary
                        example = vocabulary.decode(truth), vocabulary.decode(seq)
    model.train()
    return errors / total, example


# -- settings and checkpoints -------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Settings (SETTINGS): None here means "not given", so --resume can tell them apart.
    p.add_argument("--steps", type=int, help=f"total training steps (default {PACK_STEPS} on packs, "
                                             f"{BUILTIN_STEPS} on the built-in lines)")
    p.add_argument("--batch-size", type=int, help=f"lines per step (default {SETTINGS['batch_size']})")
    p.add_argument("--lr", type=float, help=f"peak learning rate of the one-cycle schedule (default {PACK_LR})")
    p.add_argument("--seed", type=int, help="the loader's and torch's seed (default 0)")
    p.add_argument("--threads", type=int, help="torch.set_num_threads, fixed for determinism (default 2)")
    p.add_argument("--augment", action=argparse.BooleanOptionalAction,
                   help="augment the training lines with onemodel_cy.augment.text_lines() (default on)")
    p.add_argument("--bucket", action=argparse.BooleanOptionalAction,
                   help="batch lines of similar widths (BucketedSampler; default on), else plain shuffling")
    p.add_argument("--hidden", type=int, help="the model's width (default: from the vocabulary, see above)")
    p.add_argument("--train-pack", help="train on this pack (onemodel-cy pack) instead of the built-in lines")
    p.add_argument("--test-pack", help="the held-out pack (default: the train pack); written with "
                                       "--vocabulary-from the train pack")
    p.add_argument("--mean", type=float, help="§6 mean for a pack of 8-bit pixels (default 0.5)")
    p.add_argument("--std", type=float, help="§6 std for a pack of 8-bit pixels (default 0.25)")
    p.add_argument("--train-size", type=int, help="built-in training lines (dataset seed --seed; default 12800)")
    p.add_argument("--eval-size", type=int, help="built-in held-out lines (dataset seed --seed + 1; default 1000)")
    p.add_argument("--zero-images", action="store_true", default=None,
                   help="train on blank images (a control: the CER must then stay high)")
    # How this process runs: free to change between a stop and its resume.
    p.add_argument("--workers", type=int, default=2, help="loader worker threads")
    p.add_argument("--eval-every", type=int, help="held-out CER every N steps (0: only at the end; "
                                                  "default: a tenth of --steps)")
    p.add_argument("--log-every", type=int, default=50, help="a progress line every N steps (without a bar)")
    p.add_argument("--checkpoint", help="write the checkpoint here at --stop-at and at the end "
                                        "(with --resume: default the resumed file)")
    p.add_argument("--stop-at", type=int, help="stop after this many steps (write --checkpoint)")
    p.add_argument("--resume", help="go on from this checkpoint, with its settings and packs")
    p.add_argument("--losses-out", help="write the losses of the steps run, as float.hex, to this JSON file")
    p.add_argument("--target-cer", type=float, default=None, help="exit 1 if the final CER is not below this")
    p.add_argument("--no-bar", action="store_true", help="progress lines instead of a tqdm bar")
    args = p.parse_args(argv)
    if args.stop_at is not None and not (args.checkpoint or args.resume):
        p.error("--stop-at needs --checkpoint")
    if args.test_pack is not None and args.train_pack is None and args.resume is None:
        p.error("--test-pack needs --train-pack")
    return args


def settings_of(args, saved=None):
    """Fill the settings not given: from the checkpoint's (``saved``) when resuming, else the
    defaults. A setting given that differs from the checkpoint's is refused, naming both;
    the packs are checked by content instead (``check_data``), so a moved pack resumes."""
    for key, default in SETTINGS.items():
        given = getattr(args, key)
        if saved is None:
            setattr(args, key, default if given is None else given)
        elif given is None:
            setattr(args, key, saved[key])
        elif given != saved[key] and key not in ("train_pack", "test_pack"):
            option = "--" + key.replace("_", "-")
            raise SystemExit(f"refusing to resume {args.resume}: it was trained with {option} {saved[key]}, "
                             f"and this run was given {option} {given}")
    if args.train_pack is not None and args.test_pack is None:
        args.test_pack = args.train_pack
    # Absolute paths (a URL as given), so that the checkpoint's hints hold from any folder.
    for key in ("train_pack", "test_pack"):
        path = getattr(args, key)
        if path is not None and "://" not in path:
            setattr(args, key, os.path.abspath(path))
    if args.steps is None:
        args.steps = BUILTIN_STEPS if args.train_pack is None else PACK_STEPS
    if args.lr is None:
        args.lr = BUILTIN_LR if args.train_pack is None else PACK_LR
    if args.eval_every is None:
        args.eval_every = max(1, args.steps // 10)
    return {key: getattr(args, key) for key in SETTINGS}


def data_record(train_set, held_out, args):
    """What a checkpoint names its data by: each dataset's fingerprint (a pack's is its content,
    never its path) and size, with the pack's path as a hint for --resume."""
    def one(dataset, path):
        fingerprint = dataset.fingerprint() if hasattr(dataset, "fingerprint") else repr(dataset)
        return {"fingerprint": fingerprint, "lines": len(dataset), "path": path}
    return {"train": one(train_set, args.train_pack), "test": one(held_out, args.test_pack)}


def check_data(saved, current, checkpoint):
    """Refuse a checkpoint trained on other data, naming the recorded and the given dataset."""
    for role in ("train", "test"):
        was, now = saved[role], current[role]
        if was["fingerprint"] != now["fingerprint"]:
            raise SystemExit(f"refusing to resume {checkpoint}: its {role} data was\n"
                             f"  {was['path'] or 'the built-in lines'}: {was['fingerprint']} ({was['lines']} lines)\n"
                             f"and this run's is\n"
                             f"  {now['path'] or 'the built-in lines'}: {now['fingerprint']} ({now['lines']} lines)\n"
                             f"pass --{role}-pack with the pack the checkpoint was trained on")


def load_checkpoint(path):
    try:
        ckpt = torch.load(path, weights_only=False)
    except (OSError, RuntimeError) as error:
        raise SystemExit(f"--resume {path}: cannot read it ({error})") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise SystemExit(f"--resume {path}: not a checkpoint of this example (format {FORMAT!r}; an older one "
                         f"records neither its settings nor its packs)")
    return ckpt


def setup_torch(args):
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(args.threads)


def save_checkpoint(path, run, model, optimizer, schedule, stream, losses_so_far, vocabulary):
    torch.save({"format": FORMAT, **run, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "schedule": schedule.state_dict(), "loader": loader_state(stream),
                "torch_rng": torch.get_rng_state(), "losses": losses_so_far,
                "vocabulary": vocabulary.symbols}, path)


# -- training ---------------------------------------------------------------------------

class Progress:
    """A tqdm bar when tqdm is installed and stderr is a terminal, else a line every ``every`` steps."""

    def __init__(self, first, stop, every, bar):
        self.first, self.stop, self.every, self.bar = first, stop, every, None
        self.started = time.perf_counter()
        if bar and sys.stderr.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                pass
            else:
                self.bar = tqdm(total=stop, initial=first, unit="step", dynamic_ncols=True)

    def say(self, text):
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text, flush=True)

    def update(self, g, stats):
        if self.bar is not None:
            self.bar.set_postfix_str(stats, refresh=False)
            self.bar.update(1)
        elif g % self.every == 0 or g == self.stop:
            done = g - self.first
            rate = done / max(1e-9, time.perf_counter() - self.started)
            eta = (self.stop - g) / max(rate, 1e-9)
            self.say(f"step {g:5d}/{self.stop}  {stats}  {rate:.2f} steps/s, {eta / 60:.1f} min left")

    def close(self):
        if self.bar is not None:
            self.bar.close()


def train(args):
    ckpt = load_checkpoint(args.resume) if args.resume else None
    settings = settings_of(args, None if ckpt is None else ckpt["settings"])
    if ckpt is not None and args.checkpoint is None:
        args.checkpoint = args.resume
    setup_torch(args)
    try:
        train_set, held_out, (in_channels, height) = make_datasets(args)
    except (OSError, ValueError) as error:
        if ckpt is None:
            raise
        raise SystemExit(f"--resume {args.resume}: cannot open the packs it was trained on ({error}); it "
                         f"recorded {ckpt['data']['train']['path']} and {ckpt['data']['test']['path']}: pass "
                         f"--train-pack and --test-pack where they are now") from None
    data = data_record(train_set, held_out, args)
    config = model_config(len(train_set.vocabulary), in_channels, height, args.hidden)
    if ckpt is not None:
        check_data(ckpt["data"], data, args.resume)
        config = ckpt["model_config"]
    train_loader = make_loader(train_set, args.batch_size, args.seed, args.workers, augmented=args.augment,
                               bucket=args.bucket)
    eval_loader = make_loader(held_out, min(EVAL_BATCH, len(held_out)), args.seed, args.workers, shuffle=False)
    model = CRNN(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.steps,
                                                   pct_start=0.1)
    ctc = nn.CTCLoss(blank=om.BLANK_ID, zero_infinity=True)
    run = {"settings": settings, "model_config": config, "data": data}
    state, losses = None, []
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        schedule.load_state_dict(ckpt["schedule"])
        torch.set_rng_state(ckpt["torch_rng"])
        state = ckpt["loader"]
    stop = args.steps if args.stop_at is None else min(args.stop_at, args.steps)
    first = 0 if state is None else state["next_g"]
    params = sum(p.numel() for p in model.parameters())
    print(f"train: {len(train_set)} lines, {len(train_set.vocabulary) - 1} symbols; held out: {len(held_out)} "
          f"lines; model: hidden {config['hidden']}, channels {config['channels']}, {params / 1e6:.2f} M parameters; "
          f"steps {first}..{stop - 1} of {args.steps}, batch {args.batch_size}, augment {args.augment}, "
          f"{'bucketed' if args.bucket else 'shuffled'} batches "
          f"({padding_fraction(train_loader.sampler, train_set.widths, 200):.1%} padding before augmentation), "
          f"{args.threads} torch threads, {args.workers} loader workers", flush=True)
    progress = Progress(first, stop, args.log_every, not args.no_bar)
    padded = real = 0
    trained = evaluating = 0.0
    last = time.perf_counter()
    with resume_stream(train_loader, state, stop) as stream:
        for batch in stream:
            with batch:
                images, targets, frames, lengths = ctc_inputs(to_torch(batch))
                padded += images.shape[0] * images.shape[-1]
                real += int(batch.widths.sum())
                if args.zero_images:
                    images = torch.zeros_like(images)
                log_probs = model(images, frames).log_softmax(-1).transpose(0, 1)     # [T, B, classes]
                loss = ctc(log_probs, targets, frames, lengths)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
            g = stream.next_g
            now = time.perf_counter()
            trained, last = trained + now - last, now
            progress.update(g, f"loss {losses[-1]:.4f}  lr {schedule.get_last_lr()[0]:.2e}  "
                               f"padding {1 - real / padded:.1%}")
            if args.eval_every and g % args.eval_every == 0 and g < stop:
                cer, (truth, predicted) = character_error_rate(model, eval_loader)
                progress.say(f"step {g:5d}  held-out CER {cer:.2%}  ({trained:.0f} s of training)  "
                             f"{truth!r} read as {predicted!r}")
                evaluating, last = evaluating + time.perf_counter() - last, time.perf_counter()
        if args.checkpoint:
            save_checkpoint(args.checkpoint, run, model, optimizer, schedule, stream, losses, train_set.vocabulary)
        end_g = stream.next_g
    progress.close()
    cer, (truth, predicted) = character_error_rate(model, eval_loader)
    print(f"{len(losses)} steps ({end_g - len(losses)}..{end_g - 1}) in {trained:.1f} s of training "
          f"({len(losses) / max(trained, 1e-9):.2f} steps/s; {evaluating:.1f} s evaluating; {args.workers} loader "
          f"workers, {args.threads} torch threads); padding {1 - real / max(padded, 1):.1%} of the batches' pixels; "
          f"held-out CER {cer:.2%} on {len(held_out)} lines; first line {truth!r} read as {predicted!r}"
          + (f"; checkpoint {args.checkpoint}" if args.checkpoint else ""), flush=True)
    if args.losses_out:
        with open(args.losses_out, "w", encoding="utf-8") as fh:
            json.dump({"first_g": end_g - len(losses), "losses": [float(v).hex() for v in losses],
                       "cer": cer}, fh)
    return cer


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    cer = train(args)
    if args.target_cer is not None and not cer < args.target_cer:
        print(f"held-out CER {cer:.2%} is not below the target {args.target_cer:.2%}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
