# §1 the loader's fetch step; the pipeline's split (_pipeline.pyx) gathers with it too.
from onemodel_cy._typedefs cimport i64
from onemodel_cy._datasets cimport PackedImages
from onemodel_cy._collate cimport Workspace

cdef Py_ssize_t gather_packed(Workspace ws, const PackedImages* view, const i64* idx, Py_ssize_t lo,
                              Py_ssize_t hi, Py_ssize_t* shape) except -1
