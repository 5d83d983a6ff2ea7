/* §6 image helpers: 8-bit gray or interleaved RGB to planar float32 (D15, D16). */
#include "port.h"

/* D15: mean and std rounded to float32 first, then the two constants in float32. */
void planar_constants(double mean, double std, float *scale, float *bias)
{
#ifdef BUG_GRAY8_DOUBLE
    *scale = (float)(1.0 / (255.0 * std));
    *bias = (float)(mean / std);
#else
    float m = (float)mean, s = (float)std;
    *scale = 1.0f / (255.0f * s);
    *bias = m / s;
#endif
}

const char *u8_to_planar(const uint8_t *src, size_t src_len, size_t channels, size_t height, size_t width,
                         size_t stride, const double *mean, const double *std, float *out)
{
    if (width > SIZE_MAX / channels || stride < width * channels) return "the row stride is shorter than a row";
    if (height > 0 && width > 0
        && (height - 1 > (SIZE_MAX - width * channels) / (stride ? stride : 1)
            || src_len < (height - 1) * stride + width * channels))
        return "the buffer is shorter than height rows of stride bytes";
    for (size_t c = 0; c < channels; c++) {
        float scale, bias;
        planar_constants(mean[c], std[c], &scale, &bias);
        for (size_t y = 0; y < height; y++)
            for (size_t x = 0; x < width; x++)  /* the product and the difference round apart */
                out[(c * height + y) * width + x] = (float)src[y * stride + x * channels + c] * scale - bias;
    }
    return NULL;
}
