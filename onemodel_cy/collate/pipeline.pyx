"""§1 the recipe: what global step ``g`` holds, for this rank, built whole or in two halves.

A :class:`Pipeline` is the part of a loader the batches are a function of: dataset,
sampler, collator, seed, transform and the rank's slot range. It is the one place that
turns ``g`` into ``(epoch, step)`` (``locate``) and builds the batch (``build``). Every
route runs it: 0 workers and ``batch_at`` on the consumer, thread workers, the packed
lane, and worker processes, which receive it pickled. Workers only decide *when* a step
is built; what it holds comes from here.

The split: for a dataset with a packed view, no transform or a built-in one
(``onemodel_cy.augment``), and no Python augmentation (a built-in one runs with the
transform), ``build`` is ``prepare`` (under the GIL: the sampler's indices, the slot table
pointed at the packed storage, the built-ins planned, the batch's layout and pool block)
followed by ``fill`` (the built-ins' kernels, the columns and images written without the
GIL, ``collate/pipeline.pxd``). The packed lane runs the two halves on two threads;
``splits()`` says whether they apply. Both halves are the very code of ``build``
(``gather_packed``, ``plan_transform``/``run_transform``, ``ImageBatchCollator.plan`` and
``fill_batch``), so the bytes are the same.
"""
cimport numpy as cnp

from onemodel_cy.core.typedefs cimport u64, i64
from onemodel_cy.core.validate cimport as_index, as_u64
from onemodel_cy.collate.batch cimport batch_in_block
from onemodel_cy.collate.bufferpool cimport Block
from onemodel_cy.collate.collator cimport Workspace, ImageBatchCollator
from onemodel_cy.data.datasets cimport PackedImages, PackedSource
from onemodel_cy.collate.fetch cimport gather_packed
from onemodel_cy.collate.transform cimport plan_transform
from onemodel_cy.augment.program cimport runs_program

from onemodel_cy.collate.fetch import build_batch

cnp.import_array()


cdef bint _builtin_get_sample(dataset):
    """Whether ``dataset``'s ``get_sample`` is a built-in one: the class that defines it is
    an extension type (compiled), not a class written in Python (a heap type)."""
    for klass in type(dataset).__mro__:
        if "get_sample" in klass.__dict__:
            return not (klass.__flags__ & (1 << 9))      # Py_TPFLAGS_HEAPTYPE
    return False


cdef class Pipeline:
    """Global step ``g`` -> slots ``[lo, hi)`` of its global batch (§1), as an ``ImageBatch``.

    Parameters are the loader's, checked there: ``dataset``, ``sampler``, ``collator``,
    ``seed`` (an integer mod 2**64), ``transform`` (or None), and the rank's slot range
    ``lo``, ``hi``. Read-only; pickles (to worker processes) when its parts do.
    """

    def __init__(self, dataset, sampler, ImageBatchCollator collator not None, seed, transform, lo, hi):
        self.dataset, self.sampler, self.collator, self.transform = dataset, sampler, collator, transform
        self.seed64 = as_u64(seed, "seed")
        self.seed = self.seed64
        self.lo, self.hi = as_index(lo, "lo"), as_index(hi, "hi")
        if not 0 <= self.lo < self.hi:
            raise ValueError(f"need 0 <= lo < hi, received lo={self.lo}, hi={self.hi}")

    def __reduce__(self):
        return (type(self), (self.dataset, self.sampler, self.collator, self.seed, self.transform, self.lo,
                             self.hi))

    def locate(self, g):
        """``(epoch, step)`` of global step ``g``: the one place the loader divides by the epoch."""
        return divmod(g, self.sampler.steps_per_epoch)

    def workspace(self, pacing=None, clock=None):
        """A building thread's own workspace (§5: reused from batch to batch), taking the
        ``pacing`` baton and adding its time to ``clock`` (a ``StageClock``) when given."""
        return Workspace(self.sampler.batch_size, pacing, clock)

    def with_pool(self, pool):
        """The same pipeline with a collator renting its batches from ``pool`` (a worker
        process builds into shared memory): the same bytes, other memory."""
        c = self.collator
        return type(self)(self.dataset, self.sampler,
                          ImageBatchCollator(c.width_multiple, c.pad_value, c.augmentation, pool=pool),
                          self.seed, self.transform, self.lo, self.hi)

    def build(self, g, Workspace workspace not None):
        """Global step ``g``: the sampler's indices, then this rank's slots fetched and collated."""
        epoch, step = self.locate(g)
        count = self.sampler.indices_into(epoch, step, workspace.indices)
        return build_batch(self.collator, self.dataset, workspace.indices, self.seed, epoch, step,
                           start=self.lo, stop=min(self.hi, count), transform=self.transform, global_step=g,
                           workspace=workspace)

    def rank_indices(self, g):
        """The dataset indices of this rank's slots of global step ``g``."""
        epoch, step = self.locate(g)
        indices = self.sampler.indices(epoch, step)
        return indices[self.lo:min(self.hi, indices.shape[0])]

    def reads_ahead(self):
        """Whether the dataset reads ahead (``PackedSource.reads_ahead``: a pack at a URL
        fetched sample by sample): the stream asks for coming steps' samples only then."""
        return isinstance(self.dataset, PackedSource) and (<PackedSource>self.dataset).reads_ahead()

    def read_ahead(self, g):
        """Have the dataset start bringing the samples of this rank's slots of global step
        ``g`` (``rank_indices``), without waiting for them; nothing for a dataset that does
        not read ahead. A sampler's error is raised here (the stream then stops reading
        ahead; the step's build reports it)."""
        if self.reads_ahead():
            (<PackedSource>self.dataset).read_ahead(self.rank_indices(g))

    def stop_read_ahead(self):
        """Have the dataset drop the read-ahead still queued (a stream that ends)."""
        if isinstance(self.dataset, PackedSource):
            (<PackedSource>self.dataset).stop_read_ahead()

    def splits(self):
        """Whether ``prepare`` + ``fill`` can build its steps: a dataset whose packed view
        serves (not a subclass with its own ``get_sample``), no transform or a built-in
        one, no Python augmentation (a built-in one is planned with the transform)."""
        cdef PackedImages view
        cdef ImageBatchCollator collator = self.collator
        return ((self.transform is None or runs_program(self.transform)) and isinstance(self.dataset, PackedSource)
                and (<PackedSource>self.dataset).packed_view(&view)
                and (not collator._python_augmentation or collator.program is not None))

    def python_stages(self):
        """The stages of ``build`` that run Python code holding the GIL, by name, in build
        order: ``"dataset"`` (a ``get_sample`` written in Python: a dataset that is not a
        built-in one, or a subclass of one with its own ``get_sample``), ``"transform"`` (one
        that is not built from ``onemodel_cy.augment``), ``"augmentation"`` (likewise). Empty
        for a pipeline that ``splits()``. ``worker_mode="auto"`` reads it
        (``workers/choice.py``)."""
        cdef ImageBatchCollator collator = self.collator
        stages = []
        if not _builtin_get_sample(self.dataset):
            stages.append("dataset")
        if self.transform is not None and not runs_program(self.transform):
            stages.append("transform")
        if collator._python_augmentation and collator.program is None:
            stages.append("augmentation")
        return tuple(stages)

    cdef object prepare(self, i64 g, Workspace ws, Prepared* out):
        """The first half of ``build(g, ws)``: the batch, its block not yet written, and in
        ``out`` what ``fill`` writes into it. None when this step cannot be split (the
        packed view refused, or a slot range ``build`` refuses): ``build`` then builds it,
        and says what is wrong. Holds ``ws`` (``claim_workspace``) until the caller lets
        it go, once the fill is done."""
        cdef PackedImages view
        if not (<PackedSource>self.dataset).packed_view(&view):
            return None
        epoch, step = self.locate(g)
        count = self.sampler.indices_into(epoch, step, ws.indices)
        cdef Py_ssize_t lo = self.lo, hi = as_index(min(self.hi, count), "stop")   # as build_batch checks it
        if not 0 <= lo < hi <= ws.indices.shape[0]:
            return None
        cdef u64 epoch64 = as_u64(epoch, "epoch"), step64 = as_u64(step, "step")
        cdef ImageBatchCollator collator = self.collator
        cdef Py_ssize_t shape[2]
        cdef Py_ssize_t total_width
        cdef bint baton = False
        collator.claim_workspace(ws)
        try:
            (<PackedSource>self.dataset).ensure_samples(ws.indices, lo, hi)
            read = gather_packed(ws, &view, <const i64*>cnp.PyArray_DATA(ws.indices), lo, hi, shape)
            (<PackedSource>self.dataset).pixels_read(read)
            out.transform = NULL
            if self.transform is not None or collator.program is not None:
                out.transform = plan_transform(ws, self.transform, collator.program, hi - lo, shape, self.seed64,
                                               epoch64, step64, lo)
            block = collator.plan(ws.jobs, hi - lo, shape[0], shape[1], &out.layout, &total_width)
            batch = batch_in_block(block, &out.layout, epoch, step, g)
        except BaseException:
            ws.let_go(hi - lo, &baton)
            raise
        out.jobs, out.n, out.first_slot = ws.jobs, hi - lo, lo
        out.data = (<Block>block).data
        out.kernel = &collator._kernel
        out.pad = collator.pad_value
        out.seed, out.epoch, out.step = self.seed64, epoch64, step64
        out.failed = False
        return batch
