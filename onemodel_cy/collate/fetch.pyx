"""§1 the fetch step of the loader: (dataset, indices, slot range, transform) -> slot table.

Owned by the loader: this is where a global step's samples are read. A dataset that
offers a packed view (``PackedSource``, ``data/datasets.pxd``) is gathered straight
from its storage without the GIL; any other dataset, or any loader with a transform, is
read sample by sample with ``get_sample`` in one loop in C, each sample passed through
``transform(sample, SampleRng(derive(seed, epoch, step, slot, 0)))`` (D17). A built-in
transform (``onemodel_cy.augment``) is not called: the slot table is read as without one
(the packed view serves), then the transform is planned and run on it without the GIL
(``collate/transform.pyx``), with the same bytes. The collator then assembles the slot
table into the batch (§4).
"""
cimport numpy as cnp

from onemodel_cy.core.typedefs cimport u64, i64
from onemodel_cy.core.validate cimport add_note, as_index, as_u64, checked_add, describe
from onemodel_cy.core.rng cimport SampleRng, derive_seed, STREAM_TRANSFORM
from onemodel_cy.data.datasets cimport PackedImages, PackedSource, Sample, PIXELS_FLOAT32
from onemodel_cy.collate.collator cimport SlotJob, Workspace, ImageBatchCollator, fill_slot, step_name
from onemodel_cy.collate.pacing cimport Pacing
from onemodel_cy.collate.profile cimport StageClock, clock_ns
from onemodel_cy.collate.transform cimport TransformRun, plan_transform, run_transform
from onemodel_cy.augment.program cimport runs_program

cnp.import_array()

cdef i64 INT32_END = 1 << 31
ROUTES = (None, "packed", "samples")


def build_batch(ImageBatchCollator collator not None, dataset, cnp.ndarray indices not None, seed, epoch,
                step, *, start=0, stop=None, transform=None, global_step=None, Workspace workspace=None,
                route=None):
    """The batch of slots ``[start, stop)`` of the global batch ``indices`` (int64).

    Parameters
    ----------
    collator : ImageBatchCollator
    dataset : object with ``get_sample(i) -> Sample``
    indices : numpy.ndarray
        C-contiguous 1-D int64: the global batch's dataset indices (slot = position).
    seed, epoch, step : int
        The loader's seed, the epoch and the step in the epoch.
    start, stop : int
        The slot range built (a rank's share; the whole batch by default).
    transform : callable, optional
        ``transform(sample, rng) -> Sample`` (stream 0); a built-in one runs without the GIL.
    global_step : int, optional
        ``g``, stored in the batch and named in error notes.
    workspace : Workspace, optional
        The calling worker's workspace (the collator's per-thread one by default).
    route : None, "packed" or "samples"
        None picks the packed view when the dataset offers one and there is no
        transform or a built-in one; "packed" requires it; "samples" always calls
        ``get_sample``.
    """
    # numpy's C fields, never Python attributes (an ndarray subclass may report anything).
    if (cnp.PyArray_TYPE(indices) != cnp.NPY_INT64 or cnp.PyArray_NDIM(indices) != 1
            or not cnp.PyArray_ISNOTSWAPPED(indices) or not cnp.PyArray_IS_C_CONTIGUOUS(indices)
            or not cnp.PyArray_ISALIGNED(indices)):
        raise TypeError(f"indices must be an aligned C-contiguous 1-D native int64 array, received "
                        f"{describe(indices)}")
    cdef Py_ssize_t length = cnp.PyArray_DIMS(indices)[0]
    first = as_index(start, "start")
    end = length if stop is None else as_index(stop, "stop")
    if not 0 <= first < end <= length:
        raise ValueError(f"need 0 <= start < stop <= len(indices) = {length}, "
                         f"received start={first}, stop={end}")
    cdef Py_ssize_t lo = first, hi = end
    # Every conversion (which may run user code) before the slot table points anywhere.
    epoch_value, step_value = as_index(epoch, "epoch"), as_index(step, "step")
    cdef u64 seed64 = as_u64(seed, "seed"), epoch64 = as_u64(epoch_value, "epoch")
    cdef u64 step64 = as_u64(step_value, "step")
    if global_step is not None:
        global_step = as_index(global_step, "global_step")
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES}, received {route!r}")
    if transform is not None and not callable(transform):
        raise TypeError(f"transform must be callable as transform(sample, rng) or None, "
                        f"received {type(transform).__name__}")
    cdef PackedImages view
    cdef bint builtin = transform is not None and runs_program(transform)
    cdef bint packed = (route != "samples" and (transform is None or builtin) and isinstance(dataset, PackedSource)
                        and (<PackedSource>dataset).packed_view(&view))
    if route == "packed" and not packed:
        raise TypeError(f"route='packed' needs a dataset with a packed view and no transform or a built-in one, "
                        f"received {type(dataset).__name__} with transform={transform!r}")
    cdef Workspace ws = collator.claim_workspace(workspace)
    cdef bint baton = False
    cdef Py_ssize_t shape[2]
    cdef Py_ssize_t read
    try:
        try:
            # A remote pack: the batch's missing samples fetched together, on either route.
            if isinstance(dataset, PackedSource):
                (<PackedSource>dataset).ensure_samples(indices, lo, hi)
            if packed:
                read = gather_packed(ws, &view, <const i64*>cnp.PyArray_DATA(indices), lo, hi, shape)
                (<PackedSource>dataset).pixels_read(read)
        except Exception as error:
            add_note(error, f"onemodel_cy: while building {step_name(global_step, epoch_value, step_value)}")
            raise
        if not packed:
            read_samples(ws, dataset, indices, lo, hi, None if builtin else transform, seed64, epoch64, step64,
                         global_step, epoch_value, step_value, shape, &baton)
        if builtin or collator.program is not None:
            transform_slots(ws, transform if builtin else None, collator.program, hi - lo, shape, seed64, epoch64,
                            step64, lo, global_step, epoch_value, step_value)
        return collator.assemble(ws, hi - lo, shape[0], shape[1], seed64, epoch64, step64, epoch_value,
                                 step_value, global_step, lo, collator.program is not None, &baton)
    finally:
        ws.let_go(hi - lo, &baton)


cdef Py_ssize_t gather_packed(Workspace ws, const PackedImages* view, const i64* idx, Py_ssize_t lo,
                              Py_ssize_t hi, Py_ssize_t* shape) except -1:
    """Point slots [lo, hi) of the table at the packed storage, without the GIL; returns
    the bytes of pixels they point at."""
    if view.count >= INT32_END:
        raise ValueError(f"dataset indices must fit int32 (§4 Indices), the dataset has {view.count} samples")
    cdef Py_ssize_t n = hi - lo, j, bad = -1
    cdef SlotJob* jobs = ws.reserve(n)
    cdef const i64* shapes = view.shapes
    cdef i64 i, first, bad_index = 0
    cdef bint out_of_range = False
    with nogil:
        first = idx[lo]
        if not 0 <= first < view.count:
            bad = 0
            out_of_range = True
        for j in range(n if bad < 0 else 0):
            i = idx[lo + j]
            bad_index = i          # the messages below use this copy: idx may change meanwhile
            if not 0 <= i < view.count:
                bad = j
                out_of_range = True
                break
            if shapes[3 * i] != shapes[3 * first] or shapes[3 * i + 1] != shapes[3 * first + 1]:
                bad = j
                break
            jobs[j].kind = view.kind
            jobs[j].convert = view.convert
            if view.kind == PIXELS_FLOAT32:
                jobs[j].pixels = view.pixels + view.pixel_offsets[i]
            else:
                jobs[j].bytes = view.bytes + view.pixel_offsets[i]
            jobs[j].width = shapes[3 * i + 2]
            jobs[j].target = view.targets + view.target_offsets[i]
            jobs[j].target_length = view.target_offsets[i + 1] - view.target_offsets[i]
            jobs[j].label = view.labels[i]
            jobs[j].index = i
    if out_of_range:
        raise IndexError(f"slot {lo + bad}: dataset index must lie in [0, {view.count}), "
                         f"received {first if bad == 0 and not 0 <= first < view.count else bad_index}")
    if bad >= 0:
        raise ValueError(
            f"slot {lo + bad} (dataset index {bad_index}): every sample of a batch must share C and H; "
            f"slot {lo} has C={shapes[3 * first]}, H={shapes[3 * first + 1]}, received "
            f"C={shapes[3 * bad_index]}, H={shapes[3 * bad_index + 1]}")
    shape[0] = shapes[3 * first]
    shape[1] = shapes[3 * first + 1]
    # Each image lies inside the pixel storage (checked when its owner opened it), so a
    # slot's size fits; the batch's sum is checked.
    cdef Py_ssize_t pixel_size = sizeof(float) if view.kind == PIXELS_FLOAT32 else 1, read = 0
    for j in range(n):
        read = checked_add(read, jobs[j].width * shape[0] * shape[1] * pixel_size, "the batch's pixel bytes")
    return read


cdef int transform_slots(Workspace ws, transform, augmentation, Py_ssize_t n, Py_ssize_t* shape, u64 seed64,
                         u64 epoch64, u64 step64, Py_ssize_t first_slot, global_step, epoch, step) except -1:
    """The built-in ``transform`` and ``augmentation`` (either None) on the n slots of ``ws``'s
    table (``collate/transform.pyx``): planned here, run without the GIL (their time counts
    as the batch's copy)."""
    cdef const TransformRun* run
    cdef int status
    cdef StageClock clock = ws.clock
    cdef i64 started
    try:
        run = plan_transform(ws, transform, augmentation, n, shape, seed64, epoch64, step64, first_slot)
    except Exception as error:
        add_note(error, f"onemodel_cy: while building {step_name(global_step, epoch, step)}")
        raise
    with nogil:
        started = clock_ns() if clock is not None else 0
        status = run_transform(run)
    if clock is not None:
        clock.copy_ns += clock_ns() - started
    if status < 0:
        raise MemoryError(f"{step_name(global_step, epoch, step)}: a kernel of a built-in transform or "
                          f"augmentation could not allocate its memory")
    return 0


cdef int read_samples(Workspace ws, dataset, cnp.ndarray indices, Py_ssize_t lo, Py_ssize_t hi, transform,
                      u64 seed64, u64 epoch64, u64 step64, global_step, epoch, step, Py_ssize_t* shape,
                      bint* baton) except -1:
    """Fill slots [lo, hi) from ``dataset.get_sample`` (and the transform), holding each
    sample in the workspace until the batch is built. Takes the pacing's baton first."""
    get_sample = getattr(dataset, "get_sample", None)
    if not callable(get_sample):
        raise TypeError(f"dataset must provide get_sample(index) -> Sample, received {type(dataset).__name__}")
    cdef const i64* idx = <const i64*>cnp.PyArray_DATA(indices)
    cdef Py_ssize_t n = hi - lo, j, slot
    cdef i64 index
    cdef SampleRng rng
    cdef Pacing pacing = ws.pacing
    cdef StageClock clock = ws.clock
    cdef i64 started = 0, fetched = 0
    if pacing is not None:
        baton[0] = pacing.try_take()     # without releasing the GIL when it is free
        if not baton[0]:
            with nogil:
                baton[0] = pacing.take()
    ws.reserve(n)
    # The reads are timed from the end of the previous transform call (two clock reads a
    # sample with a transform, two a batch without; the slot's checks count as the read).
    if clock is not None:
        started = clock_ns()
    for j in range(n):
        slot = lo + j
        index = idx[slot]
        if not 0 <= index < INT32_END:
            raise IndexError(f"slot {slot}: dataset index must lie in [0, 2**31) (int32 Indices), "
                             f"received {index}")
        try:
            item = get_sample(index)
            if transform is not None:
                if clock is not None:
                    fetched = clock_ns()
                    clock.get_sample_ns += fetched - started
                rng = SampleRng.__new__(SampleRng)
                rng._state = derive_seed(seed64, epoch64, step64, <u64>slot, STREAM_TRANSFORM)
                item = transform(item, rng)
                if clock is not None:
                    started = clock_ns()
                    clock.transform_ns += started - fetched
        except BaseException as error:
            if isinstance(error, Exception):
                add_note(error, f"onemodel_cy: while building {step_name(global_step, epoch, step)}, "
                                f"slot {slot}, dataset index {index}")
            raise
        if not isinstance(item, Sample):
            source = "the transform" if transform is not None else "dataset.get_sample"
            raise TypeError(f"{step_name(global_step, epoch, step)}, slot {slot}, dataset index {index}: "
                            f"{source} returned {type(item).__name__}; a Sample(image, target, label) "
                            f"is required")
        ws.held[j] = item
        fill_slot(ws, j, item, index, lo, shape)
    if clock is not None:
        clock.get_sample_ns += clock_ns() - started
    return 0
