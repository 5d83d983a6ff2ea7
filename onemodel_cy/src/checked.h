/* Overflow-checked size arithmetic (one home: core/validate.pxd declares these).
   Each returns 1 when the exact result does not fit, leaving *out unspecified; 0 otherwise.
   Every byte or element count a kernel relies on is computed through these, so a check can
   never pass on a wrapped value. */
#ifndef ONEMODEL_CY_CHECKED_H
#define ONEMODEL_CY_CHECKED_H
#include <stddef.h>
#include <stdint.h>
#include <Python.h>

#if defined(__GNUC__) || defined(__clang__)
static inline int om_mul_overflow(Py_ssize_t a, Py_ssize_t b, Py_ssize_t* out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline int om_add_overflow(Py_ssize_t a, Py_ssize_t b, Py_ssize_t* out) {
    return __builtin_add_overflow(a, b, out);
}
#else
static inline int om_mul_overflow(Py_ssize_t a, Py_ssize_t b, Py_ssize_t* out) {
    if (a < 0 || b < 0) return 1;                 /* sizes only */
    if (a != 0 && b > PY_SSIZE_T_MAX / a) return 1;
    *out = a * b;
    return 0;
}
static inline int om_add_overflow(Py_ssize_t a, Py_ssize_t b, Py_ssize_t* out) {
    if (a < 0 || b < 0) return 1;
    if (a > PY_SSIZE_T_MAX - b) return 1;
    *out = a + b;
    return 0;
}
#endif
#endif
