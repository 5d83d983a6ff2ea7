"""A built-in transform (``onemodel_cy.augment``) on every route, without the GIL.

The fetch step does not call a built-in transform sample by sample: it plans the batch's
transforms (the output widths known before the batch is laid out) and runs the kernels
without the GIL (``collate/transform.pyx``); a packed dataset then still takes the split
``prepare`` + ``fill`` (the packed lane). These tests hold that route to the Python route
(the same transform called as ``transform(sample, rng)`` by a wrapper, which the loader
cannot see into) byte for byte, on every dataset kind, every worker mode and a resume, and
to the oracle (``reference.py``).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import onemodel_cy as om
import reference as R
import reference_augment as RA
from harness import _guard  # noqa: F401  (autouse: no worker may outlive a test)
from harness import assert_same, assert_stream_is_batch_at, drain_ok, finish
from onemodel_cy import augment as A
from onemodel_cy.workers.lane import LaneEngine
from onemodel_cy.workers.threads import ThreadEngine

pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py

HEIGHT = 12


def line_images(n, seed, channels):
    """Text-line-like 8-bit images: dark strokes on light paper, widths 1..90."""
    rng = np.random.default_rng(seed)
    images = []
    for i in range(n):
        width = 1 if i == 0 else int(rng.integers(2, 90))
        image = np.full((HEIGHT, width) if channels == 1 else (HEIGHT, width, 3), 230, np.uint8)
        image[rng.random(image.shape) < 0.3] = rng.integers(0, 80)
        images.append(image)
    return images


def dataset_of(kind, folder):
    """30 samples of one kind: a gray or RGB pack (8-bit pixels converted, §6), an
    in-memory float32 dataset, or a Python dataset (``get_sample`` only)."""
    channels = 3 if kind == "rgb8 pack" else 1
    images = line_images(30, 5, channels)
    items = [(image, [1 + i % 5, 2], i % 4) for i, image in enumerate(images)]
    if kind.endswith("pack"):
        path = os.path.join(folder, kind.replace(" ", "-"))
        om.pack(items, path, progress=False)
        return om.PackedImageDataset(path, 1 / 255, -0.5)
    floats = [(image.astype(np.float32) / 255)[None] for image in images]
    array = om.ArrayImageDataset(floats, [t for _, t, _ in items], [label for _, _, label in items])
    return array if kind == "float32 array" else PythonDataset(array)


class PythonDataset:
    """Only ``get_sample`` and ``len``: the fetch step reads it sample by sample."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def get_sample(self, i):
        return self.inner.get_sample(i)


def called_from_python(transform):
    """The same transform as a Python callable: the loader calls it per sample, under the GIL."""
    return lambda sample, rng: transform(sample, rng)


def loader_of(dataset, transform, workers=0, mode="thread", prefetch=2, augmentation=None, **kw):
    return om.DataLoader(dataset, om.ShuffledSampler(len(dataset), 7, seed=4),
                         om.ImageBatchCollator(width_multiple=4, pad_value=-1.0, augmentation=augmentation),
                         seed=21, transform=transform, workers=workers, prefetch=prefetch, worker_mode=mode, **kw)


KINDS = ["gray8 pack", "rgb8 pack", "float32 array", "python dataset"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_builtin_transform_gives_the_python_routes_bytes_and_splits_on_a_packed_view(kind, tmp_path):
    dataset = dataset_of(kind, str(tmp_path))
    preset = A.text_lines()
    builtin, python = loader_of(dataset, preset), loader_of(dataset, called_from_python(preset))
    assert builtin._pipeline.splits() == (kind != "python dataset")
    assert not python._pipeline.splits()
    for g in range(2 * builtin.steps_per_epoch):
        assert_same(builtin.batch_at(g), python.batch_at(g), f"{kind}: batch_at({g})")


def test_a_python_augmentation_still_runs_after_a_builtin_transform(tmp_path):
    dataset = dataset_of("gray8 pack", str(tmp_path))

    def augmentation(scratch, rng):
        scratch *= np.float32(rng.next_single())

    builtin = loader_of(dataset, A.text_lines(), augmentation=augmentation)
    python = loader_of(dataset, called_from_python(A.text_lines()), augmentation=augmentation)
    assert not builtin._pipeline.splits()
    for g in range(3):
        assert_same(builtin.batch_at(g), python.batch_at(g), f"batch_at({g})")
    unaugmented = loader_of(dataset, A.text_lines()).batch_at(0)
    assert not np.array_equal(builtin.batch_at(0).images, unaugmented.images)


def test_the_packed_route_is_the_oracle(tmp_path):
    """The oracle's batch: get_sample of the pack (§6), the contract's preset (stream 0), a
    built-in augmentation (stream 1), collated (§4)."""
    dataset = dataset_of("gray8 pack", str(tmp_path))
    photometric = A.Compose([A.BrightnessContrast(), A.Invert()])
    loader = loader_of(dataset, A.text_lines(), augmentation=photometric)
    preset = RA.text_lines()

    def transform(sample, rng):
        image, target, label = sample
        return (RA.apply(preset, image, rng), target, label)

    def augmentation(scratch, rng):
        scratch[...] = RA.apply(("compose", [("brightness_contrast", (0.7, 1.3), (-0.3, 0.3)), ("invert", 0.0, 1.0)]),
                                scratch, rng)

    def get_sample(i):
        sample = dataset.get_sample(i)
        return (np.array(sample.image), list(sample.target), sample.label)

    oracle_sampler = R.ShuffledSampler(len(dataset), 7, seed=4)
    for g in range(loader.steps_per_epoch + 2):
        want = R.batch(get_sample, oracle_sampler, 21, g, width_multiple=4, pad_value=-1.0,
                       augmentation=augmentation, transform=transform)
        assert_same(loader.batch_at(g), want, f"batch_at({g})")


AUGMENTATIONS = {"kernel": lambda: om.GaussianNoise(0.05),
                 "built-in": lambda: A.Compose([A.GaussianBlur((0.5, 0.8)), A.SpeckleNoise()])}


@pytest.mark.parametrize("kind", ["gray8 pack", "python dataset"])
@pytest.mark.parametrize("workers, mode, prefetch, augmentation", [
    (0, "thread", 1, "kernel"), (2, "thread", 1, "built-in"), (2, "thread", 4, "kernel"),
    (2, "thread", 3, "built-in"), (2, "process", 2, "built-in")])
def test_every_route_and_a_resume_give_batch_at(kind, workers, mode, prefetch, augmentation, tmp_path):
    dataset = dataset_of(kind, str(tmp_path))
    loader = loader_of(dataset, A.text_lines(p_warp=1.0, p_noise=1.0), workers, mode, prefetch,
                       augmentation=AUGMENTATIONS[augmentation]())
    with loader.iter(0, 12) as stream:
        batches = drain_ok(stream)
        engine = stream._engine if stream._engine is not None else loader._idle_engine
    if workers and mode == "thread":
        assert type(engine) is (LaneEngine if kind == "gray8 pack" else ThreadEngine)
    assert_stream_is_batch_at(batches, loader, range(12), f"{kind}, {workers} {mode} workers")
    with loader.iter(7, 12) as stream:
        assert_stream_is_batch_at(drain_ok(stream), loader, range(7, 12), "resumed at 7")
    finish(loader)


def test_ranks_share_the_global_batch(tmp_path):
    """Each rank's slots are the whole batch's (their rng is keyed by the global slot)."""
    dataset = dataset_of("gray8 pack", str(tmp_path))
    whole = loader_of(dataset, A.text_lines())
    ranks = [loader_of(dataset, A.text_lines(), rank=r, world_size=7) for r in range(7)]
    for g in range(3):
        full = whole.batch_at(g).as_dict()
        for r, loader in enumerate(ranks):
            part = loader.batch_at(g)
            width = part.images.shape[3]
            assert np.array_equal(part.widths, full["widths"][r:r + 1])
            assert np.array_equal(part.images[0, :, :, :part.widths[0]].view(np.uint32),
                                  full["images"][r, :, :, :part.widths[0]].view(np.uint32)), (g, r, width)


def test_a_builtin_augmentation_gives_what_collate_gives_calling_it(tmp_path):
    """The collator's built-in augmentation, planned with the transform in a loader, gives
    the bytes of ``collate``, which calls it on each slot's copy (stream 1)."""
    dataset = dataset_of("float32 array", str(tmp_path))
    augmentation = A.Compose([A.Erode(2), A.BrightnessContrast(), A.ImpulseNoise()])
    loader = loader_of(dataset, None, augmentation=augmentation)
    assert loader._pipeline.splits()
    for g in range(3):
        epoch, step = divmod(g, loader.steps_per_epoch)
        indices = loader.sampler.indices(epoch, step)
        samples = [dataset.get_sample(int(i)) for i in indices]
        want = loader.collator.collate(samples, indices, 21, epoch, step)
        got = loader.batch_at(g)
        assert np.array_equal(got.images.view(np.uint32), want.images.view(np.uint32)), g


def test_an_augmentation_that_can_change_the_shape_is_refused():
    with pytest.raises(TypeError, match=r"can change the image's shape: use it as the loader's transform"):
        om.ImageBatchCollator(augmentation=A.RandomApply(A.Stretch((0.5, 2.0)), 0.5))


class Doubled(A.Stretch):
    """A subclass whose call is not the program: the loader must call it."""

    def __call__(self, sample, rng):
        out = super().__call__(sample, rng)
        return om.Sample(out.image * np.float32(2), out.target, out.label)


def test_a_subclass_that_overrides_call_is_called(tmp_path):
    dataset = dataset_of("gray8 pack", str(tmp_path))
    op = Doubled((1.5, 1.5))
    loader = loader_of(dataset, op)
    assert not loader._pipeline.splits()
    plain = loader_of(dataset, A.Stretch((1.5, 1.5))).batch_at(0)
    doubled = loader.batch_at(0)
    for j, width in enumerate(plain.widths):
        assert np.array_equal(doubled.images[j, :, :, :width], plain.images[j, :, :, :width] * np.float32(2))


class Halved(A.BrightnessContrast):
    """A subclass whose apply is not the program (the call uses it): the loader must call it."""

    def apply(self, image, rng):
        return super().apply(image, rng) * np.float32(0.5)


def test_a_subclass_that_overrides_apply_is_called(tmp_path):
    dataset = dataset_of("gray8 pack", str(tmp_path))
    as_transform = loader_of(dataset, Halved((1.0, 1.0), (0.0, 0.0)))
    as_augmentation = loader_of(dataset, None, augmentation=Halved((1.0, 1.0), (0.0, 0.0)))
    plain = loader_of(dataset, None).batch_at(0)
    for loader in (as_transform, as_augmentation):
        assert not loader._pipeline.splits()
        got = loader.batch_at(0)
        for j, width in enumerate(plain.widths):
            assert np.array_equal(got.images[j, :, :, :width], plain.images[j, :, :, :width] * np.float32(0.5))
    epoch, step = divmod(0, as_augmentation.steps_per_epoch)
    indices = as_augmentation.sampler.indices(epoch, step)
    want = as_augmentation.collator.collate([dataset.get_sample(int(i)) for i in indices], indices, 21, epoch, step)
    assert np.array_equal(as_augmentation.batch_at(0).images.view(np.uint32), want.images.view(np.uint32))


def test_a_composition_refuses_a_child_with_its_own_python():
    with pytest.raises(TypeError, match=r"Halved overrides __call__ or apply"):
        A.Compose([A.Invert(), Halved()])
    with pytest.raises(TypeError, match=r"Doubled overrides __call__ or apply"):
        A.RandomApply(Doubled(), 0.5)


def test_an_uninitialised_builtin_augmentation_says_so():
    class Unready(A.Invert):
        def __init__(self):
            pass

    with pytest.raises(RuntimeError, match="never initialised"):
        om.ImageBatchCollator(augmentation=Unready())


@pytest.mark.parametrize("workers", [0, 2])
def test_outputs_of_different_heights_are_refused_naming_the_slot(workers, tmp_path):
    """A transform that gives some slots another height cannot be collated: the same error
    at batch_at and from the lane, naming the slot and the heights."""
    dataset = dataset_of("gray8 pack", str(tmp_path))
    loader = loader_of(dataset, A.RandomApply(A.ResizeHeight(8), 0.5), workers)
    with pytest.raises(ValueError, match=r"after the transform; slot 0 has H=(8|12), received H=(8|12)") as direct:
        loader.batch_at(0)
    with loader.iter(0, 3) as stream:
        with pytest.raises(ValueError) as streamed:
            next(iter(stream))
    assert str(streamed.value) == str(direct.value)
    assert "global step 0" in " ".join(getattr(direct.value, "__notes__", []))
    finish(loader)
