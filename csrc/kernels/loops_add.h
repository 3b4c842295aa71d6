/*
 * The float32 and float64 adds (kernels.h's add loops) on x86-64 vectors,
 * included by loops.h once per SIMD level: x = x * scale + t, or x + t, with
 * the operations of loops.h's DEFINE_ADD (the definition, which other CPUs
 * run) in the same order, x the first operand of each: the same bits.
 *
 * Why by hand: GCC vectorises DEFINE_ADD one vector a step, row by row.  On
 * the AMD EPYC (Zen 5) four vectors a step, every load before the stores,
 * with contiguous rows taken as one, took 0.81x to 0.89x that loop's time
 * on float32 arrays of 8 to 32 MB beside their table, at AVX2 and at the
 * SSE2 baseline alike, and 0.9x NumPy's own add (a C microbenchmark of both
 * loops on the same buffers, 2026-11-26).  The AVX-512 level keeps 32-byte
 * vectors: where x starts 16 bytes past a line (NumPy's large arrays start
 * 16 bytes past a page) 64-byte vectors made a float32 add of (512, 32, 512)
 * 1.3x slower there.
 */
#if !defined(SINPE_LOOPS) || !defined(SINPE_VEC16)
#error "loops_add.h is included by loops.h only, on x86-64 (kernels/vec.h)"
#endif

/* The vectors (add_ps, add_pd) and their intrinsics (ADD_OP) are the ISA's
 * (kernels/isa/): 16 bytes at SSE2, 32 at AVX2 and AVX-512. */

/* One row of `count` elements; `scaled` a constant at each call site. */
#define DEFINE_ADD_ROW(name, T, V, kind)                                                      \
    static SINPE_INLINE void name(T *x, const T *t, ptrdiff_t count, T scale, int scaled)     \
    {                                                                                         \
        enum { LANES = (int)(sizeof(V) / sizeof(T)) };                                        \
        const V s = ADD_OP(set1, kind)(scale);                                                \
        ptrdiff_t l = 0;                                                                      \
        for (; l + 4 * LANES <= count; l += 4 * LANES) {                                      \
            V a = ADD_OP(loadu, kind)(x + l), b = ADD_OP(loadu, kind)(x + l + LANES);         \
            V c = ADD_OP(loadu, kind)(x + l + 2 * LANES);                                     \
            V d = ADD_OP(loadu, kind)(x + l + 3 * LANES);                                     \
            if (scaled) {                                                                     \
                a = ADD_OP(mul, kind)(a, s);                                                  \
                b = ADD_OP(mul, kind)(b, s);                                                  \
                c = ADD_OP(mul, kind)(c, s);                                                  \
                d = ADD_OP(mul, kind)(d, s);                                                  \
            }                                                                                 \
            a = ADD_OP(add, kind)(a, ADD_OP(loadu, kind)(t + l));                             \
            b = ADD_OP(add, kind)(b, ADD_OP(loadu, kind)(t + l + LANES));                     \
            c = ADD_OP(add, kind)(c, ADD_OP(loadu, kind)(t + l + 2 * LANES));                 \
            d = ADD_OP(add, kind)(d, ADD_OP(loadu, kind)(t + l + 3 * LANES));                 \
            ADD_OP(storeu, kind)(x + l, a);                                                   \
            ADD_OP(storeu, kind)(x + l + LANES, b);                                           \
            ADD_OP(storeu, kind)(x + l + 2 * LANES, c);                                       \
            ADD_OP(storeu, kind)(x + l + 3 * LANES, d);                                       \
        }                                                                                     \
        for (; l < count; ++l) {                                                              \
            x[l] = ADD_ELEM(x[l], t[l], scale, AS_IS, AS_IS, scaled);                         \
        }                                                                                     \
    }

/* The kernel over rows: loops.h's */
#define DEFINE_ADD_BY_HAND(name, T, V, kind)                                                  \
    DEFINE_ADD_ROW(name##_row, T, V, kind)                                                    \
    DEFINE_ADD_KERNEL(name, T, T)

DEFINE_ADD_BY_HAND(add_f32, float, add_ps, ps)
DEFINE_ADD_BY_HAND(add_f64, double, add_pd, pd)
