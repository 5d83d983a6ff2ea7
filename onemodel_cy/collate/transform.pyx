"""§1 a built-in transform over the slot table, without the GIL.

When the loader's transform is a built-in one (``onemodel_cy.augment``, a ``Transform``
whose call is its program), the fetch step does not call it sample by sample. It gathers
the slot table as if there were no transform (the packed view, or ``get_sample``), then:

* ``plan_transform`` (under the GIL): for each slot, the program planned with the slot's
  stream-0 rng (D17), so every output shape is known, then the collator's built-in
  augmentation, if any, with its stream-1 rng (it keeps the shape: its steps are appended
  to the slot's); the slots that run a step are pointed at their outputs in a staging
  buffer. The batch's padded width follows.
* ``run_transform`` (without the GIL): each planned slot's steps, from its input (an 8-bit
  input converted first, §6, as ``get_sample`` would) into its staged output.

The bytes are those of ``transform(sample, rng)`` called on the sample ``get_sample``
returns, then ``augmentation(image, rng)`` on its copy: the same plans and the same
kernels (``augment/program.pyx``). The buffers belong
to the workspace and only grow: a warm workspace allocates nothing.
"""
from libc.stdlib cimport malloc, free

from onemodel_cy.core.typedefs cimport u64
from onemodel_cy.core.validate cimport checked_add, checked_mul
from onemodel_cy.core.rng cimport derive_seed, STREAM_TRANSFORM, STREAM_AUGMENTATION
from onemodel_cy.augment.kernels cimport Step
from onemodel_cy.augment.program cimport Transform, Shape, plan_node, scratch_floats, run_steps
from onemodel_cy.collate.collator cimport SlotJob, Workspace
from onemodel_cy.data.datasets cimport PIXELS_FLOAT32
from onemodel_cy.data.row cimport convert_image


cdef class TransformScratch:
    """A workspace's memory for its batches' built-in transforms (grows, never shrinks)."""

    def __dealloc__(self):
        free(self.slots)
        free(self.steps)
        free(self.staged)
        free(self.buffers)

    def __reduce__(self):
        raise TypeError("a TransformScratch holds one thread's scratch memory and cannot be pickled")

    cdef int grow(self, Py_ssize_t slots, Py_ssize_t steps, Py_ssize_t staged, Py_ssize_t buffers) except -1:
        """Room for `slots` SlotRuns, `steps` Steps and the floats of both buffers (what
        they held is not kept)."""
        if slots > self.slot_capacity:
            free(self.slots)
            self.slots, self.slot_capacity = NULL, 0
            self.slots = <SlotRun*>allocate(checked_mul(slots, sizeof(SlotRun), "the transforms' slots"))
            self.slot_capacity = slots
        if steps > self.step_capacity:
            free(self.steps)
            self.steps, self.step_capacity = NULL, 0
            self.steps = <Step*>allocate(checked_mul(steps, sizeof(Step), "the transforms' steps"))
            self.step_capacity = steps
        if staged > self.staged_capacity:
            free(self.staged)
            self.staged, self.staged_capacity = NULL, 0
            self.staged = <float*>allocate(checked_mul(staged, sizeof(float), "the transforms' outputs"))
            self.staged_capacity = staged
        if buffers > self.buffer_capacity:
            free(self.buffers)
            self.buffers, self.buffer_capacity = NULL, 0
            self.buffers = <float*>allocate(checked_mul(buffers, sizeof(float), "the transforms' scratch"))
            self.buffer_capacity = buffers
        return 0


cdef void* allocate(Py_ssize_t nbytes) except NULL:
    cdef void* memory = malloc(nbytes)
    if memory == NULL:
        raise MemoryError(f"the built-in transform's scratch: cannot allocate {nbytes} bytes")
    return memory


cdef const TransformRun* plan_transform(Workspace ws, object transform, object augmentation, Py_ssize_t n,
                                        Py_ssize_t* shape, u64 seed, u64 epoch, u64 step,
                                        Py_ssize_t first_slot) except NULL:
    cdef Transform first = transform, second = augmentation
    cdef Py_ssize_t leaves = 0
    for program in (first, second):
        if program is not None:
            (<Transform>program).ready()
            leaves += (<Transform>program).leaf_count
    leaves = max(leaves, 1)
    if ws.transforms is None:
        ws.transforms = TransformScratch()
    cdef TransformScratch scratch = ws.transforms
    scratch.grow(n, checked_mul(n, leaves, "the transforms' steps"), 0, 0)
    cdef SlotJob* jobs = ws.jobs
    cdef SlotRun* slots = scratch.slots
    cdef Step* steps = scratch.steps
    cdef Shape out
    cdef u64 state
    cdef Py_ssize_t j, staged = 0, size = 1, floats, first_height = 0
    cdef const Step* last
    for j in range(n):
        out.c, out.h, out.w = shape[0], shape[1], jobs[j].width
        slots[j].source = jobs[j]
        slots[j].first = j * leaves
        slots[j].count = 0
        if first is not None:
            state = derive_seed(seed, epoch, step, <u64>(first_slot + j), STREAM_TRANSFORM)
            slots[j].count = plan_node(first.nodes, 0, &out, &state, steps + j * leaves, 0)
        if second is not None:      # keeps the shape (the collator checked)
            state = derive_seed(seed, epoch, step, <u64>(first_slot + j), STREAM_AUGMENTATION)
            slots[j].count = plan_node(second.nodes, 0, &out, &state, steps + j * leaves, slots[j].count)
        if j == 0:
            first_height = out.h
        elif out.h != first_height:
            raise ValueError(f"slot {first_slot + j} (dataset index {jobs[j].index}): every sample of a batch "
                             f"must share C and H after the transform; slot {first_slot} has H={first_height}, "
                             f"received H={out.h} from {transform!r}")
        if slots[j].count == 0:
            continue
        floats = scratch_floats(steps + j * leaves, slots[j].count)
        if floats < 0:
            raise ValueError(f"slot {first_slot + j} (dataset index {jobs[j].index}): transforming an image of "
                             f"shape {(shape[0], shape[1], jobs[j].width)} would need more float32 scratch than "
                             f"memory can hold")
        size = max(size, floats)
        staged = checked_add(staged, checked_mul(checked_mul(out.c, out.h, "an output"), out.w, "an output"),
                             "the transforms' outputs")
    # Three buffers for run_steps, a fourth for an 8-bit input converted (at most the first step's input).
    scratch.grow(0, 0, staged, checked_mul(size, 4, "the transforms' scratch"))
    staged = 0
    for j in range(n):
        if slots[j].count == 0:
            slots[j].out = NULL
            continue
        slots[j].out = scratch.staged + staged
        last = &steps[slots[j].first + slots[j].count - 1]
        jobs[j].kind = PIXELS_FLOAT32
        jobs[j].pixels = slots[j].out
        jobs[j].width = last.ow
        staged += last.c * last.oh * last.ow
    shape[1] = first_height
    scratch.run.slots, scratch.run.n, scratch.run.steps = slots, n, steps
    scratch.run.buffers, scratch.run.size = scratch.buffers, size
    return &scratch.run


cdef int run_transform(const TransformRun* run) noexcept nogil:
    cdef Py_ssize_t j
    cdef const SlotRun* slot
    cdef const SlotJob* source
    cdef const float* pixels
    cdef float* converted = run.buffers + 3 * run.size
    cdef Py_ssize_t channels, height
    for j in range(run.n):
        slot = &run.slots[j]
        if slot.count == 0:
            continue
        source = &slot.source
        pixels = source.pixels
        if source.kind != PIXELS_FLOAT32:       # as get_sample converts it (§6)
            channels, height = run.steps[slot.first].c, run.steps[slot.first].h
            convert_image(source.bytes, channels, height, source.width, source.width * channels, converted,
                          source.width, source.convert, source.convert + 3, 0)
            pixels = converted
        if run_steps(run.steps + slot.first, slot.count, pixels, slot.out, run.buffers, run.size) < 0:
            return -1
    return 0
