"""A JAX training step fed by the loader: batches handed to JAX without a copy, on the CPU.

    pip install -e '.[jax]'
    python examples/train_step_jax.py            # 300 steps, about 10 s on a 2-core CPU

The data is a small learnable set made here with NumPy: grey text-line-like images of
height 8 and width 12-40 whose class (one of 4) sets the brightness of one band of rows,
under noise. The model pools each image over its real width only (``batch["widths"]``
masks the padding), then a linear layer; plain SGD on softmax cross-entropy, in one
``jax.jit``-compiled step. ``onemodel_cy.interop.to_jax`` hands each batch over through
DLPack: on the CPU the JAX arrays are the batch's own pooled memory (checked below).

Padded widths differ from batch to batch, and ``jit`` compiles once per input shape;
``width_multiple=16`` keeps the number of shapes (and compilations) small.

The script prints the loss every 50 steps and a final line
``train_step_jax: steps N, loss A -> B, held-out accuracy C``; it exits 1 if the loss did
not fall or if a batch was copied on its way to JAX.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import jax
import jax.numpy as jnp

import onemodel_cy as om
from onemodel_cy.interop import to_jax

CLASSES, HEIGHT = 4, 8


def make_dataset(count, seed):
    """``count`` images [1, 8, W]: class k lights rows 2k and 2k+1 (plus noise everywhere)."""
    rng = np.random.default_rng(seed)
    images, targets, labels = [], [], []
    for _ in range(count):
        label = int(rng.integers(CLASSES))
        width = int(rng.integers(12, 41))
        image = rng.normal(0.0, 0.35, size=(1, HEIGHT, width)).astype(np.float32)
        image[0, 2 * label:2 * label + 2, :] += 1.0
        images.append(image)
        targets.append(np.array([label], dtype=np.int32))
        labels.append(label)
    return om.ArrayImageDataset(images, targets, labels)


def build_loader(dataset, seed, workers):
    sampler = om.ShuffledSampler(len(dataset), 32, seed=seed)
    collator = om.ImageBatchCollator(width_multiple=16, augmentation=om.GaussianNoise(0.05))
    return om.DataLoader(dataset, sampler, collator, seed=seed, workers=workers, prefetch=4)


def features(images, widths):
    """Mean of every row over the image's real width: [B, H] (the padding never counts)."""
    columns = jnp.arange(images.shape[3])
    mask = (columns[None, :] < widths[:, None]).astype(images.dtype)          # [B, Wp]
    summed = jnp.einsum("bchw,bw->bh", images, mask)
    return summed / widths[:, None].astype(images.dtype)


def loss_fn(params, images, widths, labels):
    logits = features(images, widths) @ params["w"] + params["b"]
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=1))


@jax.jit
def train_step(params, images, widths, labels, lr):
    loss, grads = jax.value_and_grad(loss_fn)(params, images, widths, labels)
    params = jax.tree_util.tree_map(lambda p, g: p - lr * g, params, grads)
    return params, loss


@jax.jit
def predict(params, images, widths):
    return jnp.argmax(features(images, widths) @ params["w"] + params["b"], axis=1)


def shares_memory(batch, arrays):
    """Whether every JAX array is the batch's own memory (DLPack, no copy)."""
    return all(arrays[name].unsafe_buffer_pointer() == getattr(batch, name).ctypes.data
               for name in ("images", "widths", "labels"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    parser.add_argument("--workers", type=int, default=2, help="loader worker threads (default 2)")
    parser.add_argument("--lr", type=float, default=0.5, help="SGD learning rate (default 0.5)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    train = build_loader(make_dataset(1024, args.seed), args.seed, args.workers)
    held_out = build_loader(make_dataset(256, args.seed + 1), args.seed, workers=0)
    key = jax.random.PRNGKey(args.seed)
    params = {"w": 0.01 * jax.random.normal(key, (HEIGHT, CLASSES)), "b": jnp.zeros(CLASSES)}
    losses, copied, t0 = [], 0, time.perf_counter()
    with train.iter(0, args.steps) as stream:
        for batch in stream:
            with batch:
                arrays = to_jax(batch)
                copied += not shares_memory(batch, arrays)
                params, loss = train_step(params, arrays["images"], arrays["widths"], arrays["labels"], args.lr)
                losses.append(float(loss))      # waits for the step: the batch is free to close
            if batch.global_step % 50 == 0:
                print(f"step {batch.global_step:4d}  loss {losses[-1]:.4f}")
    elapsed = time.perf_counter() - t0
    correct = total = 0
    for batch in held_out.iter(0, held_out.steps_per_epoch):
        with batch:
            arrays = to_jax(batch)
            guess = np.asarray(predict(params, arrays["images"], arrays["widths"]))
            correct += int((guess == batch.labels).sum())
            total += len(batch.labels)
    first, last = float(np.mean(losses[:10])), float(np.mean(losses[-10:]))
    print(f"train_step_jax: steps {args.steps}, loss {first:.4f} -> {last:.4f}, held-out accuracy "
          f"{correct / total:.3f}, {elapsed:.1f} s, {copied} batches copied on the way to JAX")
    return 0 if last < first and copied == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
