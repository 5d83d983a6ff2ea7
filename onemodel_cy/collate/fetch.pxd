# §1 the loader's fetch step; the pipeline's split (collate/pipeline.pyx) gathers with it too.
from onemodel_cy.core.typedefs cimport i64
from onemodel_cy.data.datasets cimport PackedImages
from onemodel_cy.collate.collator cimport Workspace

cdef Py_ssize_t gather_packed(Workspace ws, const PackedImages* view, const i64* idx, Py_ssize_t lo,
                              Py_ssize_t hi, Py_ssize_t* shape) except -1
