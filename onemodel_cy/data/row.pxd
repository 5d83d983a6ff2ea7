# The §6 conversion kernels of src/row.h (pure C, no Python), the one home of §6's
# arithmetic: one set of declarations for the collator, gray8_to_planar / rgb8_to_planar
# (data/image.pyx) and the tests' entry to them (onemodel_cy/testing/_kernels.pyx). `stride`
# is the bytes from one source row to the next (>= width * channels).
cdef extern from "row.h":
    void convert_image "om_convert_image"(const unsigned char* src, Py_ssize_t channels, Py_ssize_t height,
                                          Py_ssize_t width, Py_ssize_t stride, float* dst, Py_ssize_t padded,
                                          const float* scale, const float* bias, float pad) noexcept nogil
    int convert_gray "om_convert_gray"(const unsigned char* src, Py_ssize_t height, Py_ssize_t width,
                                       Py_ssize_t stride, float* dst, Py_ssize_t padded, float scale,
                                       float bias, float pad, int streamed, int cap) noexcept nogil
    int simd_level "om_simd_level"() noexcept nogil
    void stream_fence "om_stream_fence"() noexcept nogil
    void prefetch "om_prefetch"(const void* p, size_t nbytes) noexcept nogil
    void prefetch_pages "om_prefetch_pages"(void* p, size_t nbytes) noexcept nogil
