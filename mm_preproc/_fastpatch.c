/* mm_preproc._fastpatch: patchify + rescale/normalize + temporal repeat in one pass.
 *
 * The optional native twin of patchify.patch_planes + patchify.normalize_into (see there and
 * docs/mm_preproc.md, "Speed"). Input: the resized image, H x W x 3 (RGB) or H x W x 4 (Pillow's
 * RGBX memory, the 4th byte ignored) uint8, C-contiguous. Output: (N, 3*2*14*14) float32 in
 * Qwen2-VL's patch order, value = fmaf(u, scale[c], bias[c]) -- one rounding, as OpenCV's
 * addWeighted computes u*a + b with FMA where the CPU has it, so the values are bit-identical
 * to the numpy/OpenCV path there (and within one float32 ulp elsewhere).
 *
 * Why native: the output is 23 MB of float32 per 1280-token image, and written with ordinary
 * stores every cache line is first read from memory. Non-temporal (streaming) stores avoid that
 * read; numpy and OpenCV have no way to issue them, and their two passes (per-channel
 * conversion into a temporary, then a copy into both time slots) cost about twice as much.
 *
 * Two pass-free variants. RGBX input and a 16-byte aligned output (the pipeline's case:
 * run_rgbx): per patch, channel and pair of patch rows, byte-shuffle the channel out of 4
 * pixels at a time, convert, one FMA, and stream the 2P floats (P/2 aligned 16-byte vectors: a
 * P*P-float slot is 16-byte aligned when the output is and P is even; for P = 14 one vector
 * straddles the two rows) into every time slot. Otherwise (RGB input, an odd patch size, or an
 * output only 4-byte aligned, which gets ordinary stores): per block row of M x M merged
 * patches (M*P image rows), convert the rows to three float planes (a few hundred KB, in L2),
 * then copy each patch's rows from the planes into every time slot. A patch side that is a
 * multiple of 8 (16) with a 32-byte aligned output (the pipeline's, mm_preproc.buffers) takes a
 * third, 32-byte variant of the RGBX loop (run_rgbx8). The patch sizes of the
 * Qwen-VL families (14, 16) get their own compiled copies of the loops (constant P, unrolled).
 * On x86 the kernel is compiled for AVX2+FMA and used only where the CPU has both (usable());
 * elsewhere mm_preproc keeps the numpy path. The GIL is released while it runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#if defined(__x86_64__) || defined(__i386__)
#define FASTPATCH_X86 1
#include <immintrin.h>
#else
#define FASTPATCH_X86 0
#endif
#include <math.h>
#include <stdint.h>
#include <string.h>

#if FASTPATCH_X86
/* Compiled for AVX2 + FMA whatever the build flags; used only where the CPU has both (usable()).
 * fmaf is then one instruction, and gcc -O3 vectorizes the loop. */
#define KERNEL __attribute__((target("avx2,fma")))
#else
#define KERNEL
#endif
/* inlined into each caller, so that a constant patch size unrolls the inner loops */
#define INLINE_KERNEL static inline __attribute__((always_inline)) KERNEL

/* The geometry of one call: patch side, merge side, temporal repeats. */
typedef struct {
    int ps, ms, tp;
} Geometry;

static KERNEL void convert_rows(const uint8_t *src, Py_ssize_t count, int depth, float *p0,
                                float *p1, float *p2, const float *s, const float *b) {
    const float s0 = s[0], s1 = s[1], s2 = s[2], b0 = b[0], b1 = b[1], b2 = b[2];
    if (depth == 4) {
        for (Py_ssize_t k = 0; k < count; k++) {
            p0[k] = fmaf((float)src[4 * k + 0], s0, b0);
            p1[k] = fmaf((float)src[4 * k + 1], s1, b1);
            p2[k] = fmaf((float)src[4 * k + 2], s2, b2);
        }
    } else {
        for (Py_ssize_t k = 0; k < count; k++) {
            p0[k] = fmaf((float)src[3 * k + 0], s0, b0);
            p1[k] = fmaf((float)src[3 * k + 1], s1, b1);
            p2[k] = fmaf((float)src[3 * k + 2], s2, b2);
        }
    }
}

/* Whether to use the kernel on this CPU: x86-64 with AVX2 and FMA, where it was measured (without
 * FMA, fmaf is a library call per value and the numpy/OpenCV path is faster). Other
 * architectures compile it but keep the numpy path until someone measures it there. */
static int cpu_ok(void) {
#if FASTPATCH_X86
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

/* One patch: rows i*ps.. of the three planes, columns x0..x0+ps-1, into every time slot. */
INLINE_KERNEL void write_patch(float *o, const float *const pl[3], Py_ssize_t width,
                               Py_ssize_t x0, int i, int stream, const int ps, const int tp) {
    const int pp = ps * ps;
    for (int c = 0; c < 3; c++) {
        const float *rows = pl[c] + (Py_ssize_t)i * ps * width + x0;
        float *d = o + (c * tp) * pp;
#if FASTPATCH_X86
        if (stream) {
            /* two patch rows = 2*ps floats = ps/2 aligned 16-byte vectors (slots are 16-byte
             * aligned for an even ps); when ps % 4 == 2 one vector takes 2 floats of each row */
            for (int r = 0; r < ps; r += 2) {
                const float *a = rows + r * width, *b = a + width;
                for (int k = 0; k < ps / 2; k++) {
                    const int off = 4 * k;
                    __m128 v;
                    if (off + 4 <= ps)
                        v = _mm_loadu_ps(a + off);
                    else if (off >= ps)
                        v = _mm_loadu_ps(b + off - ps);
                    else
                        v = _mm_movelh_ps(
                            _mm_castpd_ps(_mm_load_sd((const double *)(a + ps - 2))),
                            _mm_castpd_ps(_mm_load_sd((const double *)b)));
                    for (int t = 0; t < tp; t++) _mm_stream_ps(d + t * pp + r * ps + off, v);
                }
            }
            continue;
        }
#endif
        for (int r = 0; r < ps; r++)
            for (int t = 0; t < tp; t++)
                memcpy(d + t * pp + r * ps, rows + r * width, ps * sizeof(float));
    }
}

INLINE_KERNEL void run_body(const uint8_t *img, Py_ssize_t height, Py_ssize_t width, int depth,
                            float *out, float *planes, const float *scale, const float *bias,
                            const int ps, const int ms, const int tp) {
    const Py_ssize_t gh = height / ps, gw = width / ps, strip = (Py_ssize_t)ms * ps * width;
    const Py_ssize_t row = 3 * tp * ps * ps;
    /* 16-byte aligned output and an even ps: every ps*ps-float slot is 16-byte aligned too */
    const int stream = FASTPATCH_X86 && ps % 2 == 0 && ((uintptr_t)out & 15) == 0;
    float *p0 = planes, *p1 = planes + strip, *p2 = planes + 2 * strip;
    const float *pl[3] = {p0, p1, p2};
    Py_ssize_t n = 0;
    for (Py_ssize_t br = 0; br < gh / ms; br++) {
        const uint8_t *src = img + br * strip * depth;
        convert_rows(src, strip, depth, p0, p1, p2, scale, bias);
        for (Py_ssize_t bc = 0; bc < gw / ms; bc++) {
            for (int i = 0; i < ms; i++) {
                for (int j = 0; j < ms; j++, n++)
                    write_patch(out + n * row, pl, width, (bc * ms + j) * ps, i, stream, ps, tp);
            }
        }
    }
#if FASTPATCH_X86
    if (stream) _mm_sfence();
#endif
}

static KERNEL void run(const uint8_t *img, Py_ssize_t height, Py_ssize_t width, int depth,
                       float *out, float *planes, const float *scale, const float *bias,
                       Geometry g) {
    if (g.ps == 14 && g.ms == 2 && g.tp == 2)
        run_body(img, height, width, depth, out, planes, scale, bias, 14, 2, 2);
    else if (g.ps == 16 && g.ms == 2 && g.tp == 2)
        run_body(img, height, width, depth, out, planes, scale, bias, 16, 2, 2);
    else
        run_body(img, height, width, depth, out, planes, scale, bias, g.ps, g.ms, g.tp);
}

#if FASTPATCH_X86
/* The common case (Pillow's RGBX memory, 16-byte aligned output, even ps), without the float
 * planes: for each patch, channel and pair of patch rows, ps/2 16-byte loads of 4 pixels each, a
 * byte shuffle that puts channel c of each pixel in a 32-bit lane, int -> float, one FMA, and
 * ps/2 streaming stores into each time slot. */
INLINE_KERNEL void run_rgbx_body(const uint8_t *img, Py_ssize_t height, Py_ssize_t width,
                                 float *out, const float *scale, const float *bias, const int ps,
                                 const int ms, const int tp) {
    const Py_ssize_t gh = height / ps, gw = width / ps, stride = 4 * width;
    const int pp = ps * ps;
    const Py_ssize_t row = 3 * tp * pp;
    __m128i pick[3];
    __m128 vs[3], vb[3];
    for (int c = 0; c < 3; c++) {
        pick[c] = _mm_setr_epi8(c, -1, -1, -1, c + 4, -1, -1, -1, c + 8, -1, -1, -1, c + 12, -1,
                                -1, -1);
        vs[c] = _mm_set1_ps(scale[c]);
        vb[c] = _mm_set1_ps(bias[c]);
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t br = 0; br < gh / ms; br++)
        for (Py_ssize_t bc = 0; bc < gw / ms; bc++)
            for (int i = 0; i < ms; i++)
                for (int j = 0; j < ms; j++, n++) {
                    const uint8_t *p = img + (br * ms + i) * ps * stride + (bc * ms + j) * ps * 4;
                    float *o = out + n * row;
                    for (int c = 0; c < 3; c++) {
                        float *d = o + c * tp * pp;
                        for (int r = 0; r < ps; r += 2) {
                            const uint8_t *a = p + r * stride, *b = a + stride;
                            /* pixel groups of 4 across rows a and b; for ps % 4 == 2 one group
                             * is the last 2 pixels of a and the first 2 of b */
                            for (int k = 0; k < ps / 2; k++) {
                                const int off = 4 * k;
                                __m128i q;
                                if (off + 4 <= ps)
                                    q = _mm_loadu_si128((const __m128i *)(a + 4 * off));
                                else if (off >= ps)
                                    q = _mm_loadu_si128((const __m128i *)(b + 4 * (off - ps)));
                                else
                                    q = _mm_unpacklo_epi64(
                                        _mm_loadl_epi64((const __m128i *)(a + 4 * (ps - 2))),
                                        _mm_loadl_epi64((const __m128i *)b));
                                const __m128 u = _mm_cvtepi32_ps(_mm_shuffle_epi8(q, pick[c]));
                                const __m128 v = _mm_fmadd_ps(u, vs[c], vb[c]);
                                for (int t = 0; t < tp; t++)
                                    _mm_stream_ps(d + t * pp + r * ps + off, v);
                            }
                        }
                    }
                }
    _mm_sfence();
}

/* Patch sides that are multiples of 8 (Qwen3-VL's and Qwen3.5's 16) with a 32-byte aligned output
 * (every ps*ps-float slot, and every 8-float run of a patch row, is then 32-byte aligned): per
 * patch row, ps/8 32-byte loads of 8 RGBX pixels, each used for all three channels (an in-lane
 * byte shuffle puts pixels 0-3 of channel c in the low lane and 4-7 in the high one, in order),
 * int -> float, one FMA, and one 32-byte streaming store per time slot -- less than half the
 * instructions of the 16-byte loop above, whose loads are repeated per channel. */
INLINE_KERNEL void run_rgbx8_body(const uint8_t *img, Py_ssize_t height, Py_ssize_t width,
                                  float *out, const float *scale, const float *bias, const int ps,
                                  const int ms, const int tp) {
    const Py_ssize_t gh = height / ps, gw = width / ps, stride = 4 * width;
    const int pp = ps * ps;
    const Py_ssize_t row = 3 * tp * pp;
    __m256i pick[3];
    __m256 vs[3], vb[3];
    for (int c = 0; c < 3; c++) {
        pick[c] = _mm256_setr_epi8(c, -1, -1, -1, c + 4, -1, -1, -1, c + 8, -1, -1, -1, c + 12,
                                   -1, -1, -1, c, -1, -1, -1, c + 4, -1, -1, -1, c + 8, -1, -1,
                                   -1, c + 12, -1, -1, -1);
        vs[c] = _mm256_set1_ps(scale[c]);
        vb[c] = _mm256_set1_ps(bias[c]);
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t br = 0; br < gh / ms; br++)
        for (Py_ssize_t bc = 0; bc < gw / ms; bc++)
            for (int i = 0; i < ms; i++)
                for (int j = 0; j < ms; j++, n++) {
                    const uint8_t *p = img + (br * ms + i) * ps * stride + (bc * ms + j) * ps * 4;
                    float *o = out + n * row;
                    for (int r = 0; r < ps; r++) {
                        const uint8_t *a = p + r * stride;
                        __m256i q[8]; /* ps <= 64 */
                        for (int k = 0; k < ps / 8; k++)
                            q[k] = _mm256_loadu_si256((const __m256i *)(a + 32 * k));
                        /* whole patch rows (16 floats: one cache line) per channel and slot, so
                         * that each write-combining buffer fills before the next opens */
                        for (int c = 0; c < 3; c++) {
                            __m256 v[8];
                            for (int k = 0; k < ps / 8; k++)
                                v[k] = _mm256_fmadd_ps(
                                    _mm256_cvtepi32_ps(_mm256_shuffle_epi8(q[k], pick[c])),
                                    vs[c], vb[c]);
                            float *d = o + c * tp * pp + r * ps;
                            for (int t = 0; t < tp; t++)
                                for (int k = 0; k < ps / 8; k++)
                                    _mm256_stream_ps(d + t * pp + 8 * k, v[k]);
                        }
                    }
                }
    _mm_sfence();
}

static KERNEL void run_rgbx8(const uint8_t *img, Py_ssize_t height, Py_ssize_t width, float *out,
                             const float *scale, const float *bias, Geometry g) {
    if (g.ps == 16 && g.ms == 2 && g.tp == 2)
        run_rgbx8_body(img, height, width, out, scale, bias, 16, 2, 2);
    else
        run_rgbx8_body(img, height, width, out, scale, bias, g.ps, g.ms, g.tp);
}

static KERNEL void run_rgbx(const uint8_t *img, Py_ssize_t height, Py_ssize_t width, float *out,
                            const float *scale, const float *bias, Geometry g) {
    if (g.ps == 14 && g.ms == 2 && g.tp == 2)
        run_rgbx_body(img, height, width, out, scale, bias, 14, 2, 2);
    else if (g.ps == 16 && g.ms == 2 && g.tp == 2)
        run_rgbx_body(img, height, width, out, scale, bias, 16, 2, 2);
    else
        run_rgbx_body(img, height, width, out, scale, bias, g.ps, g.ms, g.tp);
}
#endif

/* normalize_patches(image, out, height, width, depth, scale, bias, patch, merge, temporal) */
static PyObject *normalize_patches(PyObject *self, PyObject *args) {
    Py_buffer image, out;
    Py_ssize_t height, width;
    int depth;
    float scale[3], bias[3];
    Geometry g;
    if (!PyArg_ParseTuple(args, "y*w*nni(fff)(fff)iii", &image, &out, &height, &width, &depth,
                          &scale[0], &scale[1], &scale[2], &bias[0], &bias[1], &bias[2], &g.ps,
                          &g.ms, &g.tp))
        return NULL;
    PyObject *result = NULL;
    const int ok_geometry = g.ps >= 1 && g.ps <= 64 && g.ms >= 1 && g.ms <= 8 && g.tp >= 1 &&
                            g.tp <= 8;
    const Py_ssize_t block = (Py_ssize_t)g.ms * g.ps;
    if (!cpu_ok()) {
        PyErr_SetString(PyExc_RuntimeError, "needs an x86-64 CPU with AVX2 and FMA");
    } else if (!ok_geometry) {
        PyErr_SetString(PyExc_ValueError, "patch 1..64, merge 1..8 and temporal 1..8 only");
    } else if ((depth != 3 && depth != 4) || height <= 0 || width <= 0 || height % block ||
               width % block) {
        PyErr_Format(PyExc_ValueError,
                     "image must be H x W x 3|4 with H, W multiples of %zd (patch * merge)", block);
    } else if (image.len != height * width * depth) {
        PyErr_SetString(PyExc_ValueError, "image buffer size does not match its shape");
    } else if (out.len != (height / g.ps) * (width / g.ps) * 3 * g.tp * g.ps * g.ps *
                              (Py_ssize_t)sizeof(float) ||
               ((uintptr_t)out.buf & 3)) {
        PyErr_SetString(PyExc_ValueError,
                        "out must be a 4-byte aligned float32 buffer of N * 3*T*P*P values");
    } else {
#if FASTPATCH_X86
        if (depth == 4 && g.ps % 8 == 0 && ((uintptr_t)out.buf & 31) == 0) {
            Py_BEGIN_ALLOW_THREADS
            run_rgbx8((const uint8_t *)image.buf, height, width, (float *)out.buf, scale, bias, g);
            Py_END_ALLOW_THREADS
            PyBuffer_Release(&image);
            PyBuffer_Release(&out);
            return Py_NewRef(Py_None);
        }
        if (depth == 4 && g.ps % 2 == 0 && ((uintptr_t)out.buf & 15) == 0) {
            Py_BEGIN_ALLOW_THREADS
            run_rgbx((const uint8_t *)image.buf, height, width, (float *)out.buf, scale, bias, g);
            Py_END_ALLOW_THREADS
            PyBuffer_Release(&image);
            PyBuffer_Release(&out);
            return Py_NewRef(Py_None);
        }
#endif
        float *planes = PyMem_RawMalloc(sizeof(float) * 3 * block * width);
        if (planes == NULL) {
            PyErr_NoMemory();
        } else {
            Py_BEGIN_ALLOW_THREADS
            run((const uint8_t *)image.buf, height, width, depth, (float *)out.buf, planes, scale,
                bias, g);
            Py_END_ALLOW_THREADS
            PyMem_RawFree(planes);
            result = Py_NewRef(Py_None);
        }
    }
    PyBuffer_Release(&image);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *usable(PyObject *self, PyObject *unused) { return PyBool_FromLong(cpu_ok()); }

static PyMethodDef methods[] = {
    {"usable", usable, METH_NOARGS, "usable(): whether this CPU runs normalize_patches fast."},
    {"normalize_patches", normalize_patches, METH_VARARGS,
     "normalize_patches(image, out, height, width, depth, scale, bias, patch, merge, temporal): "
     "patchify, rescale, normalize and repeat in time an HxWxdepth uint8 image into out "
     "(N x 3*temporal*patch*patch float32)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastpatch", NULL, -1, methods};

PyMODINIT_FUNC PyInit__fastpatch(void) { return PyModule_Create(&module); }
