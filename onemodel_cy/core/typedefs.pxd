# The C types shared by every module.
from libc.stdint cimport uint64_t, int64_t, uint32_t, int32_t

ctypedef uint64_t u64
ctypedef int64_t i64
ctypedef uint32_t u32
ctypedef int32_t i32
