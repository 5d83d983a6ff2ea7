"""The operations of :mod:`onemodel_cy.augment` and how a sample runs through them.

An operation is a :class:`Transform`: a short program of ``Node`` records (C structs,
filled once by the constructor and never changed). Applying it to an image has two
halves, both without the GIL:

* ``plan``: walk the program with the sample's rng, drawing every random parameter in the
  contract's order (docs/contract.md, "Text-line augmentations"), and write one ``Step``
  per operation that runs, with its input and output shapes. Per-pixel and per-node
  draws are not made here: the step keeps the rng's state, and the plan moves the state
  past them (SplitMix64's state only adds a constant per draw).
* ``run``: each step's kernel (``kernels.pyx``) between scratch buffers, the last one's
  pixels copied into the output array.

So the output's shape is known before any pixel is written, and a batch of built-in
transforms can be planned on one thread and written on another.
"""
cimport cython
cimport numpy as cnp
from libc.math cimport floorf, ceilf, fabsf
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
import numpy as np

from onemodel_cy.core.typedefs cimport u64
from onemodel_cy.core.rng cimport SampleRng, draw_single, draw_double, GOLDEN_GAMMA
from onemodel_cy.core.validate cimport describe, is_planar_float32
from onemodel_cy.data.datasets cimport Sample
from onemodel_cy.augment.kernels cimport (
    Step, run_step, sin_small, cos_small, BORDER_REPLICATE, BORDER_CONSTANT, K_RESIZE, K_AFFINE,
    K_PERSPECTIVE, K_ELASTIC, K_ERODE, K_DILATE, K_BLUR, K_GAIN_OFFSET, K_NOISE, K_SPECKLE, K_IMPULSE,
    K_INVERT)

cnp.import_array()

# A geometric operation's output is at most this wide (and at least 1): the documented
# rule for a width that would overflow.
WIDTH_LIMIT = 1 << 20
cdef Py_ssize_t C_WIDTH_LIMIT = WIDTH_LIMIT
# The largest output height of ResizeHeight.
HEIGHT_LIMIT = 1 << 16

cdef enum:
    N_COMPOSE = 100
    N_RANDOM_APPLY = 101
    N_ONE_OF = 102
    L_RESIZE_HEIGHT = 1
    L_STRETCH = 2
    L_AFFINE = 3
    L_PERSPECTIVE = 4
    L_ELASTIC = 5
    L_ERODE = 6
    L_DILATE = 7
    L_BLUR = 8
    L_BRIGHTNESS_CONTRAST = 9
    L_NOISE = 10
    L_SPECKLE = 11
    L_IMPULSE = 12
    L_INVERT = 13

cdef float DEG2RAD = <float>0.017453292519943295      # f32(pi / 180), bits 0x3c8efa35

cdef inline float uniform(float low, float high, u64* state) noexcept nogil:
    # f32(low + f32(f32(high - low) * u)), u = next_single()
    return low + (high - low) * draw_single(state)


cdef inline void skip_draws(u64* state, Py_ssize_t count) noexcept nogil:
    state[0] += GOLDEN_GAMMA * <u64>count


cdef Py_ssize_t geometric_width(float value) noexcept nogil:
    """floor(value + 1/2) in float32, then kept within [1, WIDTH_LIMIT]."""
    cdef float half = 0.5, limit = <float>C_WIDTH_LIMIT
    value = floorf(value + half)
    if not value >= 1:
        return 1
    if value >= limit:
        return C_WIDTH_LIMIT
    return <Py_ssize_t>value


cdef Py_ssize_t resized_width(const Node* node, Py_ssize_t h, Py_ssize_t w) noexcept nogil:
    """ResizeHeight: (w * height + h div 2) div h in exact integers, within [1, max width].
    Computed as q * height + (r * height + h div 2) div h with w = q * h + r, so that no
    product overflows."""
    cdef Py_ssize_t height = node.ia, most = node.ib
    cdef Py_ssize_t q = w // h, r = w % h
    if q >= most:                       # q * height >= most already (height >= 1)
        return most
    cdef Py_ssize_t width = q * height + (r * height + h // 2) // h
    return 1 if width < 1 else (most if width > most else width)


cdef void perspective_coefficients(const Node* node, Shape* shape, u64* state, float* out) noexcept nogil:
    """The square-to-quad map of the four jittered corners (TL, TR, BR, BL), each dx then dy."""
    cdef float zero = 0.0, fw = <float>shape.w, fh = <float>shape.h
    cdef float jitter = node.p[0] * fh
    cdef float d[8]
    cdef int k
    for k in range(8):
        d[k] = uniform(-jitter, jitter, state)
    cdef float x0 = zero + d[0], y0 = zero + d[1], x1 = fw + d[2], y1 = zero + d[3]
    cdef float x2 = fw + d[4], y2 = fh + d[5], x3 = zero + d[6], y3 = fh + d[7]
    cdef float sx = ((x0 - x1) + x2) - x3, sy = ((y0 - y1) + y2) - y3
    cdef float dx1 = x1 - x2, dx2 = x3 - x2, dy1 = y1 - y2, dy2 = y3 - y2
    cdef float den = dx1 * dy2 - dx2 * dy1
    cdef float g = zero, h = zero
    if den != zero:
        g = (sx * dy2 - dx2 * sy) / den
        h = (dx1 * sy - sx * dy1) / den
    out[0] = (x1 - x0) + g * x1      # a
    out[1] = (x3 - x0) + h * x3      # b
    out[2] = x0                      # c
    out[3] = (y1 - y0) + g * y1      # d
    out[4] = (y3 - y0) + h * y3      # e
    out[5] = y0                      # f
    out[6] = g
    out[7] = h


cdef void affine_step(const Node* node, Shape* shape, u64* state, Step* step) noexcept nogil:
    """Draws rotation (degrees), shear, scale and vertical shift; the inverse of
    scale * R(angle) * [[1, shear], [0, 1]], in closed form."""
    cdef float angle = uniform(-node.p[0], node.p[0], state)
    cdef float shear = uniform(-node.p[1], node.p[1], state)
    cdef float scale = uniform(node.p[2], node.p[3], state)
    cdef float shift = uniform(-node.p[4], node.p[4], state)
    cdef float theta = angle * DEG2RAD, one = 1.0
    cdef float sn = sin_small(theta), cs = cos_small(theta), inverse = one / scale
    step.v[0] = inverse * (cs + shear * sn)
    step.v[1] = inverse * (sn - shear * cs)
    step.v[2] = -(inverse * sn)
    step.v[3] = inverse * cs
    step.v[4] = shift
    cdef float grow = ceilf(fabsf(shear) * <float>shape.h)
    step.ow = geometric_width(<float>shape.w + grow)


cdef int plan_leaf(const Node* node, Shape* shape, u64* state, Step* step) noexcept nogil:
    """Draw one operation's parameters into `step`; update `shape` to its output."""
    cdef int kind = node.kind
    step.border, step.fill, step.ia, step.ib, step.state = node.border, node.fill, node.ia, node.ib, 0
    step.c, step.h, step.w = shape.c, shape.h, shape.w
    step.oh, step.ow = shape.h, shape.w
    if kind == L_RESIZE_HEIGHT:
        step.kind = K_RESIZE
        step.oh = node.ia
        step.ow = resized_width(node, shape.h, shape.w)
    elif kind == L_STRETCH:
        step.kind = K_RESIZE
        step.ow = geometric_width(<float>shape.w * uniform(node.p[0], node.p[1], state))
    elif kind == L_AFFINE:
        step.kind = K_AFFINE
        affine_step(node, shape, state, step)
    elif kind == L_PERSPECTIVE:
        step.kind = K_PERSPECTIVE
        perspective_coefficients(node, shape, state, step.v)
    elif kind == L_ELASTIC:
        step.kind = K_ELASTIC
        step.v[0] = uniform(node.p[0], node.p[1], state)
        step.state = state[0]
        skip_draws(state, 2 * (shape.w // node.ia + 2) * (shape.h // node.ia + 2))
    elif kind == L_ERODE or kind == L_DILATE:
        step.kind = K_ERODE if kind == L_ERODE else K_DILATE
    elif kind == L_BLUR:
        step.kind = K_BLUR
        step.v[0] = uniform(node.p[0], node.p[1], state)
    elif kind == L_BRIGHTNESS_CONTRAST:
        step.kind = K_GAIN_OFFSET
        step.v[0] = uniform(node.p[0], node.p[1], state)
        step.v[1] = uniform(node.p[2], node.p[3], state)
    elif kind == L_NOISE or kind == L_SPECKLE or kind == L_IMPULSE:
        step.kind = K_NOISE if kind == L_NOISE else (K_SPECKLE if kind == L_SPECKLE else K_IMPULSE)
        step.v[0] = uniform(node.p[0], node.p[1], state)
        step.v[1], step.v[2] = node.p[2], node.p[3]
        step.state = state[0]
        skip_draws(state, shape.c * shape.h * shape.w)
    elif kind == L_INVERT:
        step.kind = K_INVERT
        step.v[0] = node.p[0]
    shape.h, shape.w = step.oh, step.ow
    return 0


cdef Py_ssize_t plan_node(const Node* nodes, Py_ssize_t at, Shape* shape, u64* state, Step* steps,
                          Py_ssize_t count) noexcept nogil:
    """Plan the subtree at `at`, appending its steps after `count` of them; returns the new count."""
    cdef const Node* node = nodes + at
    cdef Py_ssize_t child = at + 1, _k
    cdef double u
    if node.kind == N_COMPOSE:
        for _k in range(node.count):
            count = plan_node(nodes, child, shape, state, steps, count)
            child += nodes[child].size
    elif node.kind == N_RANDOM_APPLY:
        if draw_single(state) < node.p[0]:
            count = plan_node(nodes, child, shape, state, steps, count)
    elif node.kind == N_ONE_OF:
        u = draw_double(state)
        for _k in range(node.count - 1):
            if nodes[child].bound > u:
                break
            child += nodes[child].size
        count = plan_node(nodes, child, shape, state, steps, count)
    else:
        plan_leaf(node, shape, state, steps + count)
        count += 1
    return count


cdef int run_steps(const Step* steps, Py_ssize_t n, const float* src, float* out, float* buffers,
                   Py_ssize_t size) noexcept nogil:
    """Every step in turn, between two scratch buffers (`buffers` holds three of `size`
    floats: two to alternate, one for separable passes), the last into `out`."""
    cdef const float* current = src
    cdef float* target
    cdef float* first = buffers
    cdef float* second = buffers + size
    cdef float* tmp = buffers + 2 * size
    cdef Py_ssize_t k
    for k in range(n):
        if k == n - 1:
            target = out
        elif steps[k].kind >= K_GAIN_OFFSET and current != src:
            target = <float*>current            # an in-place kind edits its own buffer
        else:
            target = second if current == first else first
        if run_step(steps + k, current, target, tmp) < 0:
            return -1
        current = target
    return 0


cdef class Transform:
    """Base of every built-in augmentation: a program that runs without the GIL.

    Call it as a loader ``transform(sample, rng) -> Sample`` (stream 0, D17): the image
    may change width (and, for :class:`ResizeHeight`, height). An operation that never
    changes the shape may also serve as the collator's augmentation, ``aug(image, rng)``
    (stream 1), which edits a float32 ``[C, H, W]`` array in place. ``apply(image, rng)``
    returns the new image without touching its argument.
    """
    def __cinit__(self):
        self.nodes = NULL

    def __dealloc__(self):
        free(self.nodes)

    cdef int claim(self, tuple args) except -1:
        if self._claimed:
            raise RuntimeError(f"{type(self).__name__}.__init__ was already called on this object (workers "
                               f"may be using it); build a new one")
        self._claimed = True
        self._args = args
        return 0

    cdef int set_program(self, Node* nodes, Py_ssize_t count, Py_ssize_t leaves, bint keeps_shape) except -1:
        self.nodes = <Node*>malloc(count * sizeof(Node))
        if self.nodes == NULL:
            raise MemoryError()
        memcpy(self.nodes, nodes, count * sizeof(Node))
        self.node_count, self.leaf_count, self.keeps_shape = count, leaves, keeps_shape
        return 0

    cdef int ready(self) except -1:
        if self.nodes == NULL:
            raise RuntimeError(f"this {type(self).__name__} was never initialised (made with __new__)")
        return 0

    def __reduce__(self):
        self.ready()
        return (type(self), self._args)

    def __repr__(self):
        if self.nodes == NULL:
            return f"{type(self).__name__}(<never initialised>)"
        return f"{type(self).__name__}({', '.join(map(repr, self._args))})"

    def __eq__(self, other):
        return type(other) is type(self) and (<Transform>other)._args == self._args

    def __hash__(self):
        return hash((type(self).__name__, self._args))

    def __call__(self, item, SampleRng rng not None):
        """``transform(sample, rng) -> Sample`` (a new sample), or ``aug(image, rng)`` editing
        a float32 ``[C, H, W]`` array in place (only when ``keeps_shape``)."""
        if isinstance(item, Sample):
            return Sample(self.apply((<Sample>item).image, rng), (<Sample>item).target, (<Sample>item).label)
        if isinstance(item, np.ndarray):
            if not self.keeps_shape:
                raise TypeError(f"{self!r} can change the image's shape: use it as the loader's transform "
                                f"(transform(sample, rng)), not as an in-place augmentation")
            if not cnp.PyArray_ISWRITEABLE(<cnp.ndarray>item):
                raise TypeError(f"an in-place augmentation edits a writable array, received {describe(item)}")
            result = self.apply(item, rng)
            item[...] = result
            return None
        raise TypeError(f"{type(self).__name__} is called with a Sample (as a transform) or a float32 "
                        f"[C, H, W] array (as an augmentation), received {type(item).__name__}")

    def apply(self, image, SampleRng rng not None):
        """The augmented copy of ``image`` (aligned, C-contiguous, native float32 ``[C, H, W]``,
        every dimension >= 1), drawing from ``rng`` (its state moves past every draw)."""
        self.ready()
        if not is_planar_float32(image, False):
            raise TypeError(f"{type(self).__name__} reads an aligned, C-contiguous, native float32 [C, H, W] "
                            f"array, received {describe(image)}")
        cdef cnp.ndarray source = image
        cdef Shape shape
        shape.c, shape.h, shape.w = source.shape[0], source.shape[1], source.shape[2]
        if shape.c < 1 or shape.h < 1 or shape.w < 1:
            raise ValueError(f"{type(self).__name__} needs every dimension >= 1, received shape "
                             f"{tuple(image.shape)}")
        cdef Step* steps = <Step*>malloc(max(self.leaf_count, 1) * sizeof(Step))
        if steps == NULL:
            raise MemoryError()
        cdef u64 state = rng._state
        cdef Py_ssize_t count
        cdef float* buffers = NULL
        cdef int status = 0
        cdef Py_ssize_t size
        cdef const float* origin = <const float*>cnp.PyArray_DATA(source)
        cdef float* destination
        try:
            with nogil:
                count = plan_node(self.nodes, 0, &shape, &state, steps, 0)
            size = scratch_floats(steps, count)
            if size < 0:
                raise ValueError(f"augmenting an image of shape {image.shape} would need more float32 scratch "
                                 f"than memory can hold")
            out = np.empty((shape.c, shape.h, shape.w), dtype=np.float32)
            destination = <float*>cnp.PyArray_DATA(<cnp.ndarray>out)
            if count == 0:
                out[...] = source
            else:
                buffers = <float*>malloc(3 * size * sizeof(float))
                if buffers == NULL:
                    raise MemoryError(f"{type(self).__name__}: no memory for 3 scratch buffers of {size} floats")
                with nogil:
                    status = run_steps(steps, count, origin, destination, buffers, size)
                if status < 0:
                    raise MemoryError(f"{type(self).__name__}: a kernel could not allocate its grid")
        finally:
            free(steps)
            free(buffers)
        rng._state = state
        return out


MAX_FLOATS = (1 << 60) // 16       # three buffers of float32, their byte count far from overflow
cdef Py_ssize_t C_MAX_FLOATS = MAX_FLOATS


cdef inline Py_ssize_t image_floats(Py_ssize_t c, Py_ssize_t h, Py_ssize_t w) noexcept nogil:
    """c * h * w (each >= 1), or -1 past MAX_FLOATS; no product overflows."""
    if h > C_MAX_FLOATS // c or w > C_MAX_FLOATS // (c * h):
        return -1
    return c * h * w


cdef Py_ssize_t scratch_floats(const Step* steps, Py_ssize_t count) noexcept nogil:
    """The largest input, output or half-resized image of the steps, in floats (at least 1)."""
    cdef Py_ssize_t size[3]
    cdef Py_ssize_t k, most = 1
    for k in range(count):
        size[0] = image_floats(steps[k].c, steps[k].h, steps[k].w)
        size[1] = image_floats(steps[k].c, steps[k].oh, steps[k].ow)
        size[2] = image_floats(steps[k].c, steps[k].h, steps[k].ow)
        if size[0] < 0 or size[1] < 0 or size[2] < 0:
            return -1
        most = max(most, size[0], size[1], size[2])
    return most


cdef bint runs_program(object transform):
    # A subclass that overrides __call__ or apply (which __call__ uses) is Python code.
    return (isinstance(transform, Transform) and type(transform).__call__ is Transform.__call__
            and type(transform).apply is Transform.apply)


# The kinds of operation, for operations.py (which checks the arguments).
LEAF_KINDS = {"resize_height": L_RESIZE_HEIGHT, "stretch": L_STRETCH, "affine": L_AFFINE,
              "perspective": L_PERSPECTIVE, "elastic": L_ELASTIC, "erode": L_ERODE, "dilate": L_DILATE,
              "blur": L_BLUR, "brightness_contrast": L_BRIGHTNESS_CONTRAST, "noise": L_NOISE,
              "speckle": L_SPECKLE, "impulse": L_IMPULSE, "invert": L_INVERT}
BORDERS = {"replicate": BORDER_REPLICATE, "constant": BORDER_CONSTANT}


@cython.final
cdef class _Builder:
    """Fills a Transform's program once; used only by operations.py's constructors."""

    @staticmethod
    def leaf(Transform op not None, str kind, tuple args, params, Py_ssize_t ia=0, Py_ssize_t ib=0,
             str border="replicate", float fill=0.0, bint keeps_shape=True):
        cdef Node node
        cdef Py_ssize_t k
        op.claim(args)
        node.kind, node.count, node.size = LEAF_KINDS[kind], 0, 1
        node.border, node.fill, node.ia, node.ib, node.bound = BORDERS[border], fill, ia, ib, 0.0
        for k in range(8):
            node.p[k] = params[k] if k < len(params) else 0.0
        op.set_program(&node, 1, 1, keeps_shape)

    @staticmethod
    def composite(Transform op not None, str kind, tuple args, list children, float p=1.0, bounds=None):
        """kind: "compose", "random_apply" (one child, applied when next_single() < p) or
        "one_of" (the child whose cumulative bound first exceeds next_double())."""
        cdef Transform child
        cdef Py_ssize_t total = 1, leaves = 0, at = 1, k
        cdef bint keeps = True
        for child in children:
            child.ready()
            total += child.node_count
            leaves += child.leaf_count
            keeps = keeps and child.keeps_shape
        cdef Node* nodes = <Node*>malloc(total * sizeof(Node))
        if nodes == NULL:
            raise MemoryError()
        try:
            op.claim(args)
            nodes[0].kind = {"compose": N_COMPOSE, "random_apply": N_RANDOM_APPLY, "one_of": N_ONE_OF}[kind]
            nodes[0].count, nodes[0].size, nodes[0].bound = len(children), total, 0.0
            nodes[0].p[0] = p
            for k, child in enumerate(children):
                memcpy(nodes + at, child.nodes, child.node_count * sizeof(Node))
                nodes[at].bound = bounds[k] if bounds is not None else 0.0
                at += child.node_count
            op.set_program(nodes, total, leaves, keeps)
        finally:
            free(nodes)
