# The program of a built-in augmentation (augment/program.pyx): what the fetch step needs to
# plan a batch's transforms under the GIL and run them without it (collate/transform.pyx).
from onemodel_cy.core.typedefs cimport u64
from onemodel_cy.augment.kernels cimport Step

cdef struct Node:
    int kind
    int count           # children of a Compose or OneOf; 1 for RandomApply
    Py_ssize_t size     # records in this subtree, itself included
    int border
    float fill
    float p[8]          # the constructor's parameters, rounded to float32
    Py_ssize_t ia, ib
    double bound        # as a OneOf's child: its cumulative bound (D10's rule)

cdef struct Shape:
    Py_ssize_t c, h, w


cdef class Transform:
    cdef Node* nodes
    cdef Py_ssize_t node_count
    cdef Py_ssize_t leaf_count         # the most steps one plan can write
    cdef readonly bint keeps_shape     # True: no operation in it can change the shape
    cdef bint _claimed
    cdef tuple _args                   # the constructor's arguments, as given back by __reduce__

    cdef int claim(self, tuple args) except -1
    cdef int set_program(self, Node* nodes, Py_ssize_t count, Py_ssize_t leaves, bint keeps_shape) except -1
    cdef int ready(self) except -1


# Whether `transform` is a built-in one whose call is its program (not a subclass that
# overrides __call__ or apply): the fetch step then plans and runs it itself, without the GIL.
cdef bint runs_program(object transform)

# Plan the program at nodes[0] for an input of `shape` (updated to the output's), drawing
# from `state`; writes at most the transform's leaf_count steps and returns how many.
cdef Py_ssize_t plan_node(const Node* nodes, Py_ssize_t at, Shape* shape, u64* state, Step* steps,
                          Py_ssize_t count) noexcept nogil

# The floats one scratch buffer of run_steps needs for these steps, or -1 past MAX_FLOATS.
cdef Py_ssize_t scratch_floats(const Step* steps, Py_ssize_t count) noexcept nogil

# Run the planned steps from `src` into `out` (the last step's shape) through `buffers`
# (3 * size floats, size = scratch_floats); 0, or -1 when a kernel could not allocate.
cdef int run_steps(const Step* steps, Py_ssize_t n, const float* src, float* out, float* buffers,
                   Py_ssize_t size) noexcept nogil
