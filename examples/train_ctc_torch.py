"""Train a small CRNN with CTC on the CPU, from built-in lines or from packs, and resume it bit for bit.

    python examples/train_ctc_torch.py                       # train, report the held-out CER
    python examples/train_ctc_torch.py --steps 600 --stop-at 300 --checkpoint run.pt
    python examples/train_ctc_torch.py --steps 600 --resume run.pt      # a new process goes on
    python examples/train_ctc_torch.py --train-pack train.pack --test-pack test.pack

The data come from ``onemodel_cy.DataLoader`` with worker threads, shuffled, padded to a
width multiple of 4: by default lines of 1 to 5 digits (``SyntheticTextLines``, 20 pixels
high); with ``--train-pack`` (and ``--test-pack``) the lines of packs written by
``onemodel-cy pack`` (the test pack with ``--vocabulary-from`` the train pack, so that both
give a symbol the same id; a pack of 8-bit pixels is read with §6 ``--mean`` and ``--std``).
The model is three conv blocks, a bidirectional GRU and a linear layer over the classes of
the dataset's ``vocabulary`` (the CTC blank first, then the symbols), trained with
``torch.nn.CTCLoss`` and Adam. Every ``--eval-every`` steps, and at the end, it decodes a
held-out set (another seed of the built-in dataset, or the test pack) greedily and prints
the character error rate (edit distance / target characters) and one decoded line.

A checkpoint (``torch.save``) holds the model, the optimizer, the learning-rate schedule,
the loader's resume state and the vocabulary's symbols (``om.Vocabulary``: what the model's
classes 1, 2, ... read as; a resume on data of another vocabulary is refused). Because
batch ``g`` is a pure function of ``(seed, g)`` (§1) and torch runs deterministically
here (``torch.manual_seed``, ``torch.use_deterministic_algorithms(True)``, a fixed
``torch.set_num_threads``), a run stopped after step k and resumed in a new process
gives, after k, the losses of the uninterrupted run bit for bit. ``--losses-out FILE``
writes each step's loss as ``float.hex`` so that runs can be compared exactly
(``spec_tests/test_api_train_example.py``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
from torch import nn

import onemodel_cy as om
from onemodel_cy.interop import to_torch

HEIGHT, MAX_LENGTH, NUM_SYMBOLS, SCALE, NOISE = 20, 5, 10, 2, 0.5
DOWNSAMPLE = 4          # the model's width stride: one output frame per 4 pixels


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


def make_loader(dataset, batch_size, seed, workers, shuffle=True):
    sampler = (om.ShuffledSampler(len(dataset), batch_size, seed=seed) if shuffle
               else om.SequentialSampler(len(dataset), batch_size, drop_last=False))
    collator = om.ImageBatchCollator(width_multiple=DOWNSAMPLE)
    return om.DataLoader(dataset, sampler, collator, seed=seed, workers=workers, prefetch=4)


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

class CRNN(nn.Module):
    """Three conv blocks (the width shrinks 4x), a bidirectional GRU, per-frame logits."""

    def __init__(self, classes, in_channels=1, height=HEIGHT, channels=(16, 32, 64), hidden=64):
        super().__init__()
        c1, c2, c3 = channels
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, c1, 3, padding=1), nn.BatchNorm2d(c1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, 3, padding=1), nn.BatchNorm2d(c2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c2, c3, 3, padding=1), nn.BatchNorm2d(c3), nn.ReLU(), nn.MaxPool2d((height // 4, 1)))
        self.rnn = nn.GRU(c3, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, images):
        x = self.features(images)                     # [B, C, 1, W/4]
        x = x.squeeze(2).transpose(1, 2)              # [B, W/4, C]
        x, _ = self.rnn(x)
        return self.head(x)                           # [B, T, classes]


def ctc_inputs(tensors):
    """The padded batch as CTC wants it: images, flat targets and both length vectors."""
    images = tensors["images"]
    frame_lengths = (tensors["widths"] // DOWNSAMPLE).long()   # frames of each line's real width
    return images, tensors["targets"].long(), frame_lengths, tensors["target_lengths"].long()


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
    """Held-out CER: total edit distance over total target characters; and the first line
    as ``(truth, prediction)`` text (the dataset's ``Vocabulary``)."""
    model.eval()
    errors = total = 0
    example = None
    with torch.no_grad(), loader.iter(0, len(loader)) as stream:
        for batch in stream:
            with batch:
                tensors = to_torch(batch)
                images, targets, frames, lengths = ctc_inputs(tensors)
                decoded = greedy_decode(model(images), frames)
                offsets = [0] + torch.cumsum(lengths, 0).tolist()
                for k, seq in enumerate(decoded):
                    truth = targets[offsets[k]:offsets[k + 1]].tolist()
                    errors += edit_distance(seq, truth)
                    total += len(truth)
                    if example is None:
                        vocabulary = loader.dataset.vocabulary
                        example = vocabulary.decode(truth), vocabulary.decode(seq)
    model.train()
    return errors / total, example


# -- training ---------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=400, help="total training steps (global steps 0..steps-1)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--train-size", type=int, default=12800, help="training lines (dataset seed --seed)")
    p.add_argument("--eval-size", type=int, default=1000, help="held-out lines (dataset seed --seed + 1)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--workers", type=int, default=2, help="loader worker threads")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (fixed: determinism)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=100, help="held-out CER every N steps (0: only at the end)")
    p.add_argument("--checkpoint", help="write the checkpoint here when stopping (--stop-at) and at the end")
    p.add_argument("--stop-at", type=int, help="stop after this many steps (write --checkpoint)")
    p.add_argument("--resume", help="go on from this checkpoint")
    p.add_argument("--losses-out", help="write the losses of the steps run, as float.hex, to this JSON file")
    p.add_argument("--zero-images", action="store_true",
                   help="train on blank images (a control: the CER must then stay high)")
    p.add_argument("--target-cer", type=float, default=None, help="exit 1 if the final CER is not below this")
    p.add_argument("--train-pack", help="train on this pack (onemodel-cy pack) instead of the built-in lines")
    p.add_argument("--test-pack", help="the held-out pack (default: the train pack); written with "
                                       "--vocabulary-from the train pack")
    p.add_argument("--mean", type=float, default=0.5, help="§6 mean for a pack of 8-bit pixels (default 0.5)")
    p.add_argument("--std", type=float, default=0.25, help="§6 std for a pack of 8-bit pixels (default 0.25)")
    args = p.parse_args(argv)
    if args.stop_at is not None and not args.checkpoint:
        p.error("--stop-at needs --checkpoint")
    if args.test_pack is not None and args.train_pack is None:
        p.error("--test-pack needs --train-pack")
    return args


def setup_torch(args):
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(args.threads)


def save_checkpoint(path, model, optimizer, schedule, stream, losses_so_far, vocabulary):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "schedule": schedule.state_dict(), "loader": loader_state(stream),
                "torch_rng": torch.get_rng_state(), "losses": losses_so_far,
                "vocabulary": vocabulary.symbols}, path)


def check_vocabulary(path, ckpt, vocabulary):
    """The checkpoint's model reads its classes through the vocabulary it was trained with:
    resuming on data that gives a symbol another id would train it on wrong targets."""
    saved = om.Vocabulary(ckpt["vocabulary"])
    if saved != vocabulary:
        t = next((t for t in range(1, min(len(saved), len(vocabulary))) if saved[t] != vocabulary[t]),
                 min(len(saved), len(vocabulary)))
        raise SystemExit(f"{path}: the checkpoint's vocabulary {saved.symbols!r} is not the data's "
                         f"{vocabulary.symbols!r} (they first differ at id {t})")


def train(args):
    setup_torch(args)
    train_set, held_out, (in_channels, height) = make_datasets(args)
    train_loader = make_loader(train_set, args.batch_size, args.seed, args.workers)
    eval_loader = make_loader(held_out, min(100, len(held_out)), args.seed, args.workers, shuffle=False)
    model = CRNN(len(train_set.vocabulary), in_channels, height)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.steps,
                                                   pct_start=0.15)
    ctc = nn.CTCLoss(blank=om.BLANK_ID, zero_infinity=True)
    state, losses = None, []
    if args.resume:
        ckpt = torch.load(args.resume, weights_only=False)
        check_vocabulary(args.resume, ckpt, train_set.vocabulary)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        schedule.load_state_dict(ckpt["schedule"])
        torch.set_rng_state(ckpt["torch_rng"])
        state = ckpt["loader"]
    stop = args.steps if args.stop_at is None else min(args.stop_at, args.steps)
    start = time.perf_counter()
    with resume_stream(train_loader, state, stop) as stream:
        for batch in stream:
            with batch:
                images, targets, frames, lengths = ctc_inputs(to_torch(batch))
                if args.zero_images:
                    images = torch.zeros_like(images)
                log_probs = model(images).log_softmax(-1).transpose(0, 1)     # [T, B, classes]
                loss = ctc(log_probs, targets, frames, lengths)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
            g = stream.next_g
            if g % 50 == 0:
                print(f"step {g:5d}  loss {loss.item():.4f}  {time.perf_counter() - start:6.1f} s", flush=True)
            if args.eval_every and g % args.eval_every == 0 and g < stop:
                print(f"step {g:5d}  held-out CER {character_error_rate(model, eval_loader)[0]:.2%}", flush=True)
        if args.checkpoint:
            save_checkpoint(args.checkpoint, model, optimizer, schedule, stream, losses, train_set.vocabulary)
        end_g = stream.next_g
    elapsed = time.perf_counter() - start
    cer, (truth, predicted) = character_error_rate(model, eval_loader)
    print(f"{len(losses)} steps ({end_g - len(losses)}..{end_g - 1}) in {elapsed:.1f} s "
          f"({elapsed / max(1, len(losses)):.3f} s/step, {args.workers} loader workers, {args.threads} torch "
          f"threads); held-out CER {cer:.2%} on {len(held_out)} lines; first line {truth!r} read as "
          f"{predicted!r}", flush=True)
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
