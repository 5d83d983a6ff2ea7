"""Fuzz the pack reader, ``PackedImageDataset(path, mean, std, verify=...)``, with packs
corrupted on disk (``docs/packed-format.md``).

Three small valid packs (gray8 with keys, rgb8, float32) are written once with
``om.pack``. Each input copies one of them into a fresh folder and applies a few
corruptions decoded from the fuzz bytes: a file truncated or extended; bytes of a header
or a body flipped or overwritten; a ``manifest.json`` field set to another value or type
(count, version, pixels kind, an array's shape, bytes, sha256, file), or deleted; an
array's values or shape rewritten and its manifest record resealed (new shape, size and
SHA-256, so that the corruption gets past the hash to the index checks); a ``.npy`` header
rewritten with another descr, shape, order or padding; a file (and maybe its manifest
record) taken from another pack; a file removed.

The pack is then opened with ``verify="index"`` and ``verify="full"``. Allowed outcomes
(docs/packed-format.md, "What a reader checks"; the exception rule of ``core/validate.pxd``):
a ``PackError``, ``ValueError`` or ``TypeError`` whose message names the pack's folder or
one of its files, or an accepted dataset. ``"full"`` checks all that ``"index"`` does, so a
pack ``"full"`` accepts ``"index"`` accepts too. An accepted dataset must serve every
sample: ``get_sample(i)`` agrees with its shape, target and label, and the loader's fast
path (``build_batch(route="packed")``, ``DataLoader.batch_at`` over the pack) gives the
bytes of the ``get_sample`` route (``route="samples"``, a loader over a wrapper offering
only ``get_sample``), bit for bit (§1, §4, §6 D15); without an augmentation each slot is
``get_sample(i)``'s image padded with the pad value (§4). With ``verify="index"`` the
pixel bytes are not hashed, so a pack whose ``pixels.npy`` body changed may be accepted:
its two routes must still agree. A segfault or a sanitizer report is a finding.
"""
import atexit
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Draw, check, main  # noqa: E402
from pipeline_parts import PyDataset  # noqa: E402  (spec_tests/, on the path through _common)

import numpy as np  # noqa: E402

import onemodel_cy as om  # noqa: E402
from onemodel_cy.data.packs import format as _format  # noqa: E402
from onemodel_cy.collate.fetch import build_batch  # noqa: E402

_format.FSYNC = False          # the harness checks bytes, not the disk's durability
ACCEPTED = (TypeError, ValueError)          # PackError is a ValueError
NAMES = ("pixels", "pixel_offsets", "shapes", "targets", "target_offsets", "labels", "keys", "key_offsets")
FILES = tuple(f"{n}.npy" for n in NAMES) + ("manifest.json",)
FIELDS = ("images", "widths", "targets", "target_lengths", "labels", "indices")
DEEP = "\x00deep\x00"           # placeholder for a value nested deeper than the JSON parser's recursion
TRACE = os.environ.get("ONEMODEL_CY_FUZZ_TRACE", "") not in ("", "0")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:             # someone else's live process
        return True
    return True


def _scratch():
    """This process's scratch folder. libFuzzer leaves by ``exit`` past Python's atexit
    handlers, so the folders of earlier runs whose process is gone are removed here."""
    root = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    prefix = "onemodel_cy-fuzz-packed-"
    for name in os.listdir(root):
        pid = name[len(prefix):]
        if name.startswith(prefix) and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    folder = os.path.join(root, f"{prefix}{os.getpid()}")
    shutil.rmtree(folder, ignore_errors=True)
    os.mkdir(folder)
    atexit.register(shutil.rmtree, folder, True)
    return folder


SCRATCH = _scratch()


def _write_seeds():
    """The three valid packs every input starts from: (folder, mean, std) by kind."""
    rng = np.random.default_rng(5)
    gray = [(rng.integers(0, 256, (2, w), dtype=np.uint8), rng.integers(0, 9, t), i - 1, f"k{i}é")
            for i, (w, t) in enumerate([(3, 2), (1, 0), (5, 3)])]
    rgb = [(rng.integers(0, 256, (3, w, 3), dtype=np.uint8), rng.integers(0, 9, t), 7 * i)
           for i, (w, t) in enumerate([(2, 1), (4, 2)])]
    flt = [(rng.standard_normal((2, 1, w)).astype(np.float32), rng.integers(0, 9, t), -i)
           for i, (w, t) in enumerate([(3, 1), (2, 0), (1, 1), (4, 2)])]
    flt[1][0][0, 0, 0] = np.float32("nan")
    flt[2][0][1, 0, 0] = np.float32("-0.0")
    seeds = {}
    for kind, items, mean, std in (("gray8", gray, 0.25, 0.5), ("rgb8", rgb, [0.1, 0.5, 0.9], [0.3, 1.0, 0.05]),
                                   ("float32", flt, None, None)):
        folder = os.path.join(SCRATCH, f"seed-{kind}")
        om.pack(items, folder, progress=False)
        seeds[kind] = (folder, mean, std)
    return seeds


SEEDS = _write_seeds()
KINDS = tuple(SEEDS)


# ---------------------------------------------------------------- corruptions

def note(what):
    if TRACE:
        print(f"corrupt: {what}", file=sys.stderr, flush=True)


def load_manifest(folder):
    """The manifest as a dict, or None when an earlier corruption left none to edit."""
    try:
        with open(os.path.join(folder, "manifest.json"), "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
    except Exception:           # noqa: BLE001  (removed, truncated, not JSON, too deep)
        return None
    return manifest if isinstance(manifest, dict) else None


def save_manifest(folder, manifest, deep=0):
    text = json.dumps(manifest, allow_nan=True)
    if deep:
        text = text.replace(json.dumps(DEEP), "[" * deep + "]" * deep)
    with open(os.path.join(folder, "manifest.json"), "w", encoding="utf-8") as f:
        f.write(text)


def pick_file(d, folder):
    present = [f for f in FILES if os.path.isfile(os.path.join(folder, f))]
    return d.pick(present) if present else None


def resize_file(d, folder):
    name = pick_file(d, folder)
    if name is None:
        return
    path = os.path.join(folder, name)
    size = os.path.getsize(path)
    new = max(0, size + d.pick([-1, 1, -4, 4, -8, 8, -size, 128 - size, 1 - size, d.small(0, 40) - 20]))
    with open(path, "r+b") as f:
        f.truncate(new)
        if new > size and d.flag():
            f.seek(size)
            f.write(d.raw(new - size).ljust(new - size, b"\xff"))
    note(f"{name}: {size} -> {new} bytes")
    maybe_reseal(d, folder, name)


def overwrite_bytes(d, folder):
    name = pick_file(d, folder)
    if name is None:
        return
    path = os.path.join(folder, name)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if not data:
        return
    head = 128 if name != "manifest.json" else len(data)
    at = d.small(0, head - 1) if d.flag() or len(data) <= 128 else d.small(128, len(data) - 1)
    at = min(at, len(data) - 1)
    if d.flag():
        data[at] ^= 1 << d.small(0, 7)
    else:
        chunk = d.raw(d.small(1, 8))
        data[at:at + len(chunk)] = chunk
    with open(path, "wb") as f:
        f.write(data)
    note(f"{name}: bytes at {at} changed")
    maybe_reseal(d, folder, name)


def odd_value(d, seed_manifest, path):
    """Another value for a manifest field: a boundary, another type, another pack's value."""
    options = [0, 1, 2, -1, 3, 4, 5, 128, 2**31 - 1, 2**31, 2**63, 2**64, -2**63, True, False, None,
               1.0, 2.5, float("nan"), float("inf"), "1", "", "gray8", "rgb8", "float32", "onemodel_cy-pack",
               [], [1], [3], [2, 3], [3, 3], [-1], [0], [2**62], [1.5], {}, {"file": "x.npy"}, "0" * 64,
               "labels.npy", "pixels.npy", "<i8", "|u1", "<f4", ">i8", DEEP]
    value = seed_manifest
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if value is not None:
        options.append(value)
    return d.pick(options)


def rewrite_manifest(d, folder):
    """A top-level field, an array's record or one field of it set to another value or removed."""
    manifest = load_manifest(folder)
    if manifest is None:
        return
    if d.flag():
        parent, path = manifest, (d.pick(["format", "version", "count", "pixels", "arrays", "vocabulary",
                                          "source"]),)
    elif d.small(0, 4) == 0:
        parent, path = manifest.get("arrays"), ("arrays", d.pick(NAMES))
    else:
        path = ("arrays", d.pick(NAMES), d.pick(["file", "dtype", "shape", "bytes", "sha256"]))
        arrays = manifest.get("arrays")
        parent = arrays.get(path[1]) if isinstance(arrays, dict) else None
    if not isinstance(parent, dict):
        return
    if d.small(0, 5) == 0:
        parent.pop(path[-1], None)
        value = None
        note(f"manifest: {'.'.join(path)} deleted")
    else:
        value = odd_value(d, load_manifest(SEEDS[d.pick(KINDS)][0]), path)
        parent[path[-1]] = value
        note(f"manifest: {'.'.join(path)} = {value!r:.80}")
    save_manifest(folder, manifest, deep=d.pick([1, 3, 100000]) if value == DEEP else 0)


def npy_bytes(descr, shape, fortran=False, length=128, major=1):
    """A ``.npy`` header as numpy writes it, padded to ``length`` bytes (any length works for
    numpy's reader; a header of another length moves the data off 64-byte alignment)."""
    dims = "(" + "".join(f"{int(n)}, " for n in shape).rstrip(" ") + ")" if len(shape) != 1 \
        else f"({int(shape[0])},)"
    text = f"{{'descr': {descr!r}, 'fortran_order': {fortran}, 'shape': {dims}, }}"
    lenbytes = 2 if major == 1 else 4
    pad = max(length - (8 + lenbytes) - len(text) - 1, 0)
    body = (text + " " * pad + "\n").encode("latin1")
    size = struct.pack("<H", len(body)) if lenbytes == 2 else struct.pack("<I", len(body))
    return b"\x93NUMPY" + bytes([major, 0]) + size + body


def reseal(folder, name):
    """Make the manifest's record of ``name`` match the file: shape from its header, its size
    and its SHA-256 (so a value corruption reaches the index checks behind the hash)."""
    path = os.path.join(folder, f"{name}.npy")
    manifest = load_manifest(folder)
    try:
        shape = header_shape(path)
    except Exception:           # noqa: BLE001  (a header numpy cannot parse: nothing to reseal)
        return
    if manifest is None:
        return
    entry = manifest.get("arrays", {}).get(name) if isinstance(manifest.get("arrays"), dict) else None
    if not isinstance(entry, dict):
        return
    with open(path, "rb") as f:
        entry["sha256"] = hashlib.sha256(f.read()).hexdigest()
    entry["bytes"], entry["shape"] = os.path.getsize(path), list(shape)
    save_manifest(folder, manifest)


def maybe_reseal(d, folder, name):
    """Half the time a changed array gets a matching manifest record: its new bytes then
    reach the header and index checks instead of stopping at the size or the hash."""
    if name.endswith(".npy") and d.flag():
        reseal(folder, name[:-4])


def header_shape(path):
    with open(path, "rb") as f:
        np.lib.format.read_magic(f)
        return np.lib.format.read_array_header_1_0(f)[0]


def present_arrays(folder):
    return [n for n in NAMES if os.path.isfile(os.path.join(folder, f"{n}.npy"))]


def rewrite_values(d, folder):
    """An array's values or shape changed, the file rewritten with a 128-byte header, resealed."""
    if not present_arrays(folder):
        return
    name = d.pick(present_arrays(folder))
    path = os.path.join(folder, f"{name}.npy")
    try:
        a, old = np.load(path), header_shape(path)
    except Exception:           # noqa: BLE001  (an array numpy cannot load: nothing to rewrite)
        return
    a = np.array(a).reshape(-1)
    how = d.small(0, 4)
    if how == 0 and a.size:                         # one value to an edge
        edge = d.integer(-3, 12)
        a[d.small(0, a.size - 1)] = np.array(edge % 2**64, dtype=np.uint64).astype(a.dtype) \
            if a.dtype.kind in "iu" else np.float32(edge if abs(edge) < 2**63 else np.inf)
        shape = old
    elif how == 1:                                  # one element fewer or more
        a = a[:-1] if a.size and d.flag() else np.concatenate([a, a[-1:] if a.size else np.zeros(1, a.dtype)])
        shape = None
    elif how == 2:                                  # another number of dimensions
        shape = d.pick([(a.size,), (1, a.size), (a.size, 1), (a.size, 1, 1), ()]) if a.size else (0,)
        if shape == ():
            a = a[:1]
            shape = () if a.size else (0,)
    elif how == 3:                                  # a dimension that is negative or zero
        shape = d.pick([(-1, -a.size), (0, -3), (-3, 0), (-1,), (0,), (0, 3)])
        a = a[:abs(int(np.prod(shape)))]            # the body numpy's size check expects
    else:                                           # the values scaled (offsets past the end, widths 0)
        a = (a.astype(np.float64 if a.dtype.kind == 'f' else np.int64) * d.pick([0, 2, -1, 3])).astype(a.dtype)
        shape = old
    if shape is None:
        shape = (a.size,) if len(old) != 2 or old[1] == 0 or a.size % old[1] else (a.size // old[1], old[1])
    with open(path, "wb") as f:
        f.write(npy_bytes(np.lib.format.dtype_to_descr(a.dtype), shape))
        f.write(a.tobytes())
    note(f"{name}: values rewritten, header shape {shape}")
    reseal(folder, name)


def rewrite_header(d, folder):
    """A header with another descr, shape, order, version or padding (the body kept)."""
    if not present_arrays(folder):
        return
    name = d.pick(present_arrays(folder))
    path = os.path.join(folder, f"{name}.npy")
    try:
        with open(path, "rb") as f:
            np.lib.format.read_magic(f)
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            body = f.read()
    except Exception:           # noqa: BLE001  (a header numpy cannot parse: keep it)
        return
    descr = d.pick([dtype.str, dtype.str, "<i8", "<i4", "|u1", "<f4", ">i8", "<u8", "|b1", "<f8", "|O"])
    if d.flag():
        shape = d.pick([shape, (len(body),), (len(body) // 8,), (len(body) // 4,), (1, len(body) // 8),
                        (len(body) // 24, 3), (len(body) // 16, 2), (2**62,), (2**31, 2**31)])
    length = d.pick([128, 128, 64, 192, 129, 130, 132, 136, 4096])
    header = npy_bytes(descr, shape, fortran=d.small(0, 5) == 0, length=length, major=d.pick([1, 1, 1, 2]))
    with open(path, "wb") as f:
        f.write(header + body)
    note(f"{name}: header descr={descr} shape={shape} length={len(header)}")
    if d.flag():
        reseal(folder, name)


def swap_file(d, folder):
    """A file from another pack, with its manifest record or without."""
    other = SEEDS[d.pick(KINDS)][0]
    name = d.pick(present_arrays(other))
    shutil.copyfile(os.path.join(other, f"{name}.npy"), os.path.join(folder, f"{name}.npy"))
    note(f"{name}.npy from {os.path.basename(other)}")
    if d.flag():
        manifest = load_manifest(folder)
        if manifest is not None and isinstance(manifest.get("arrays"), dict):
            manifest["arrays"][name] = load_manifest(other)["arrays"][name]
            save_manifest(folder, manifest)


def remove_file(d, folder):
    name = pick_file(d, folder)
    if name is None:
        return
    os.remove(os.path.join(folder, name))
    note(f"{name} removed")


def reseal_one(d, folder):
    present = present_arrays(folder)
    if present:
        reseal(folder, d.pick(present))


CORRUPTIONS = (resize_file, overwrite_bytes, rewrite_manifest, rewrite_values, rewrite_values,
               rewrite_header, swap_file, remove_file, reseal_one)


# ---------------------------------------------------------------- the checks

def names_the_pack(message, folder):
    """A refusal names the pack's folder or a file of it, or the mean/std argument that does
    not fit the pixel kind the manifest names (``gray8_to_planar``'s own message)."""
    return (folder in message or any(f in message for f in FILES)
            or message.startswith(("mean ", "std ")))


def open_pack(folder, mean, std, verify):
    """The dataset, or None for a refusal that names the pack (anything else escapes)."""
    try:
        return om.PackedImageDataset(folder, mean, std, verify=verify)
    except ACCEPTED as exc:
        check(names_the_pack(str(exc), folder),
              f"verify={verify!r}: {type(exc).__name__} names no file of the pack: {exc}")
        return None


def bits(batch):
    return tuple(np.ascontiguousarray(getattr(batch, f)).view(np.uint8).tobytes() for f in FIELDS)


def attempt(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs), None
    except (TypeError, ValueError, IndexError) as exc:
        return None, type(exc)


def check_key(ds, i):
    """A key is a str, or None without keys; keys.npy is not UTF-8 -> a PackError naming it."""
    try:
        key = ds.key(i)
    except _format.PackError as exc:
        check("keys.npy" in str(exc) and "UTF-8" in str(exc), f"sample {i}: key() raised {exc}")
        return
    has_keys = isinstance(ds.manifest["arrays"].get("keys"), dict)
    check(isinstance(key, str) if has_keys else key is None, f"sample {i}: key {key!r}")


def check_samples(ds):
    """Every sample served by get_sample, consistent with the shapes; returns them."""
    samples = []
    for i in range(len(ds)):
        s = ds.get_sample(i)
        image, target, label = tuple(s)
        image = np.asarray(image)
        check(image.dtype == np.float32 and list(image.shape) == ds.shapes[i].tolist(),
              f"sample {i}: image {image.dtype}{image.shape} but shapes says {ds.shapes[i].tolist()}")
        check(np.asarray(target).ndim == 1 and int(label) == label, f"sample {i}: target/label")
        check(ds.widths[i] == image.shape[2], f"sample {i}: widths differs")
        check_key(ds, i)
        samples.append((image, np.asarray(target), int(label)))
    return samples


def check_slot(batch, j, sample, pad):
    """§4: slot j is the sample's image, then the pad value up to the batch width."""
    image, target, label = sample
    c, h, w = image.shape
    slot = np.asarray(batch.images)[j]
    check(slot.shape[:2] == (c, h) and slot.shape[2] >= w, f"slot {j} shape {slot.shape} for image {image.shape}")
    check(slot[:, :, :w].tobytes() == image.tobytes(), f"slot {j} differs from get_sample's image")
    rest = slot[:, :, w:]
    check(rest.tobytes() == np.full(rest.shape, pad, np.float32).tobytes(), f"slot {j} padding is not {pad}")
    check(int(batch.widths[j]) == w and int(batch.labels[j]) == label, f"slot {j} width/label")


def check_routes(d, ds, samples):
    """The fast path gives the get_sample route's bytes: per sample, for a whole batch, and
    through DataLoader.batch_at with a SequentialSampler."""
    n = len(ds)
    plain = d.small(0, 2) != 0
    aug = None if plain else d.pick([om.GainOffset(0.5, -0.25), om.GaussianNoise(0.3)])
    pad = d.pick([0.0, -1.0, 0.5])
    col = om.ImageBatchCollator(d.pick([1, 1, 3, 8]), pad, aug)
    seed = d.integer(0, 2**32)
    for i in range(n):
        one = np.array([i], dtype=np.int64)
        fast = build_batch(col, ds, one, seed, 0, i, route="packed")
        slow = build_batch(col, ds, one, seed, 0, i, route="samples")
        check(bits(fast) == bits(slow), f"sample {i}: packed and samples routes differ")
        if plain:
            check_slot(fast, 0, samples[i], pad)
    indices = np.array([d.small(0, n - 1) for _ in range(d.small(1, 5))], dtype=np.int64)
    fast, fast_err = attempt(build_batch, col, ds, indices, seed, 1, 2, route="packed")
    slow, slow_err = attempt(build_batch, col, ds, indices, seed, 1, 2, route="samples")
    check(fast_err == slow_err, f"batch {indices.tolist()}: packed route raised {fast_err}, samples {slow_err}")
    if fast is not None:
        check(bits(fast) == bits(slow), f"batch {indices.tolist()}: packed and samples routes differ")
        if plain:
            for j, i in enumerate(indices):
                check_slot(fast, j, samples[int(i)], pad)
    B = d.small(1, n)
    loaders = [om.DataLoader(source, om.SequentialSampler(n, B, False), col, seed=seed)
               for source in (ds, PyDataset(ds))]
    for g in range(loaders[0].steps_per_epoch):
        (a, ea), (b, eb) = attempt(loaders[0].batch_at, g), attempt(loaders[1].batch_at, g)
        check(ea == eb, f"batch_at({g}): packed loader raised {ea}, samples loader {eb}")
        check(a is None or bits(a) == bits(b), f"batch_at({g}): the two loaders differ")


def TestOneInput(data: bytes):
    d = Draw(data)
    kind = d.pick(KINDS)
    seed_folder, mean, std = SEEDS[kind]
    folder = tempfile.mkdtemp(dir=SCRATCH)
    try:
        pack = os.path.join(folder, "p")
        shutil.copytree(seed_folder, pack)
        for _ in range(d.small(1, 4)):
            d.pick(CORRUPTIONS)(d, pack)
        opened = {v: open_pack(pack, mean, std, v) for v in ("index", "full")}
        check(opened["full"] is None or opened["index"] is not None,
              "verify='full' accepted a pack that verify='index' refuses")
        if opened["index"] is None:
            return
        samples = check_samples(opened["index"])
        if opened["full"] is not None:
            again = check_samples(opened["full"])
            check(all(a[0].tobytes() == b[0].tobytes() for a, b in zip(samples, again)),
                  "verify='index' and 'full' serve different images")
        check_routes(d, opened["index"], samples)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main(TestOneInput)
