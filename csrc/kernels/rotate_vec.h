/*
 * The rotation rows of float32, float16 and bfloat16 on x86-64 vectors
 * (kernels/vec.h), included by rotate_loops.h, whose scalar rows define the
 * bits: the same operations on each element, in the same order, but
 *     y[a] = P(x[a], c[a]) - P(x[b], s[a])   for   P(x[a], c[a]) + P(-x[b], s[a])
 * (P(-x, s) is -P(x, s) exactly, every rounding being symmetric, and
 * p - q is p + (-q)), so no FMA pattern appears and the bits are the
 * scalar ones but for NaNs.  16-bit vectors in which the narrowing reports
 * a lane (a NaN result: the NaN rule is the scalar rows'; a subnormal for
 * the hardware bfloat16 conversion) are computed again by the scalar rows
 * before anything is stored, and so are the tails of rows.
 *
 * Per element type K: K_V the values of K_LANES elements, K_LOAD widens
 * them, K_PROD(x, c) is a product rounded as the type's arithmetic rounds
 * it, K_PAIRS an interleaved vector's pairs rotated, K_FINISH rounds sums
 * for the store (reporting into `bad`), K_PUT stores; K_GROUP heads side
 * by side is the ISA's (kernels/isa/).  bfloat16 rounds its
 * products by Veltkamp's split (kernels/vec.h's bf16_round_split: three float
 * operations where the integer rounding takes five; 1.01x -> 0.78x an
 * in-place pass at AVX-512 without AVX512_BF16, 0.82x -> 0.77x with it,
 * no change at AVX2 and SSE2, Zen 5), which ORs its results into `low`: a
 * subnormal product leaves bits in their low 16 (K_LOW_BAD), and the
 * vector is reported as for `bad`.
 */
#ifndef SINPE_LOOPS
#error "rotate_vec.h is included by rotate_loops.h only"
#endif

#define F32_V vf
#define F32_OUT vf
#define F32_LANES VF_LANES
#define F32_LOAD(p) vf_load(p)
#define F32_LOADC F32_LOAD
#define F32_PROD(x, c) vf_mul(x, c)
#define F32_SUB vf_sub
#define F32_ADD vf_add
#define F32_FINISH(v) (v)
#define F32_PUT(p, o) vf_store(p, o)
#define F32_LOW_BAD(low) 0
#define F32_PAIRS(v, c, s) vf_subadd(vf_mul(v, c), vf_mul(vf_swap_pairs(v), s))

#define BF16_V v16f
#define BF16_OUT vi
#define BF16_LANES V16_LANES
#define BF16_LOAD(p) bf16_widen(vi_load(p))
#define BF16_LOADC BF16_LOAD
#define BF16_PROD(x, c) V16_PROD(bf16, x, c)
#define BF16_SUB v16_sub
#define BF16_ADD v16_add
#define BF16_FINISH(v) bf16_narrow(v, &bad)
#define BF16_PUT(p, o) vi_store(p, o)
#define BF16_LOW_BAD(low) vf_low16_any(low)
#define F16_V v16f
#define F16_OUT vi
#define F16_LANES V16_LANES
#define F16_LOAD(p) f16_widen(vi_load(p))
#define F16_LOADC F16_LOAD
#define F16_PROD(x, c) V16_PROD(f16, x, c)
#define F16_SUB v16_sub
#define F16_ADD v16_add
#define F16_FINISH(v) f16_narrow(v, &bad)
#define F16_PUT(p, o) vi_store(p, o)
#define F16_LOW_BAD(low) 0

/* A product rounded to the format, one signature for both: reports into
 * the loop's `bad` (float16's conversions) or `low` (bfloat16's split). */
static SINPE_INLINE vf bf16_round_product(vf p, int *bad, vf *low)
{
    (void)bad;
    return bf16_round_split(p, low);
}
static SINPE_INLINE vf f16_round_product(vf p, int *bad, vf *low)
{
    (void)low;
    return f16_round(p, bad);
}
#define ROUND_PRODUCT(FMT, p) FMT##_round_product(p, &bad, &low)
#define V16_PROD(FMT, x, c)                                                                   \
    ((v16f){ROUND_PRODUCT(FMT, vf_mul((x).lo, (c).lo)),                                       \
            ROUND_PRODUCT(FMT, vf_mul((x).hi, (c).hi))})

/* A 16-bit interleaved vector's pairs.  Widened even/odd (BF16_EVEN_ODD),
 * its lo register holds each pair's first element and hi its second: the
 * split formula on the two registers.  Widened in order, each register
 * holds whole pairs: products with the partner swapped in, then the first
 * of each pair subtracts and the second adds. */
#define PAIRS_EVEN_ODD(FMT, v, c, s)                                                          \
    FMT##_narrow((v16f){vf_sub(ROUND_PRODUCT(FMT, vf_mul(v.lo, c.lo)),                        \
                               ROUND_PRODUCT(FMT, vf_mul(v.hi, s.lo))),                       \
                        vf_add(ROUND_PRODUCT(FMT, vf_mul(v.hi, c.hi)),                        \
                               ROUND_PRODUCT(FMT, vf_mul(v.lo, s.hi)))},                      \
                 &bad)
#define PAIRS_IN_ORDER_REG(FMT, v, c, s)                                                      \
    vf_subadd(ROUND_PRODUCT(FMT, vf_mul(v, c)), ROUND_PRODUCT(FMT, vf_mul(vf_swap_pairs(v), s)))
#define PAIRS_IN_ORDER(FMT, v, c, s)                                                          \
    FMT##_narrow((v16f){PAIRS_IN_ORDER_REG(FMT, v.lo, c.lo, s.lo),                            \
                        PAIRS_IN_ORDER_REG(FMT, v.hi, c.hi, s.hi)},                           \
                 &bad)
#if defined(BF16_EVEN_ODD)
#define BF16_PAIRS(v, c, s) PAIRS_EVEN_ODD(bf16, v, c, s)
#else
#define BF16_PAIRS(v, c, s) PAIRS_IN_ORDER(bf16, v, c, s)
#endif
#define F16_PAIRS(v, c, s) PAIRS_IN_ORDER(f16, v, c, s)

/* Split rows: pairs (ya[j], yb[j]) from (xa[j], xb[j]) (x == y in place),
 * cosines ca, cb and sines sa, sb; `same`: cb is ca and sb is sa (a
 * rotation's own tile), each loaded once.  Scalar pairs [from, to) by the
 * scalar rows (in place or from a source, as their restrict wants). */
#define ROTATE_VEC_SPLIT(name, K, T, C)                                                       \
    static inline void name##_pairs(ptrdiff_t from, ptrdiff_t to, T *ya, T *yb, const T *xa,  \
                                    const T *xb, const C *ca, const C *cb, const C *sa,       \
                                    const C *sb)                                              \
    {                                                                                         \
        if (xa == ya) {                                                                       \
            name##_row(to - from, ya + from, yb + from, ca + from, cb + from, sa + from,      \
                       sb + from);                                                            \
        } else {                                                                              \
            name##_row_from(to - from, ya + from, yb + from, xa + from, xb + from, ca + from, \
                            cb + from, sa + from, sb + from);                                 \
        }                                                                                     \
    }                                                                                         \
    static SINPE_INLINE void name##_vrow(ptrdiff_t n, int same, T *ya, T *yb, const T *xa,    \
                                   const T *xb, const C *ca, const C *cb, const C *sa,        \
                                   const C *sb)                                               \
    {                                                                                         \
        ptrdiff_t j = 0;                                                                      \
        for (; j + K##_LANES <= n; j += K##_LANES) {                                          \
            int bad = 0;                                                                      \
            vf low = vf_set1(0.0f);                                                           \
            const K##_V a = K##_LOAD(xa + j), b = K##_LOAD(xb + j);                           \
            const K##_V c1 = K##_LOADC(ca + j), s1 = K##_LOADC(sa + j);                       \
            const K##_V c2 = same ? c1 : K##_LOADC(cb + j), s2 = same ? s1 : K##_LOADC(sb + j); \
            const K##_OUT oa = K##_FINISH(K##_SUB(K##_PROD(a, c1), K##_PROD(b, s1)));         \
            const K##_OUT ob = K##_FINISH(K##_ADD(K##_PROD(b, c2), K##_PROD(a, s2)));         \
            (void)bad;                                                                        \
            (void)low;                                                                        \
            if (bad || K##_LOW_BAD(low)) {                                                    \
                name##_pairs(j, j + K##_LANES, ya, yb, xa, xb, ca, cb, sa, sb);               \
                continue;                                                                     \
            }                                                                                 \
            K##_PUT(ya + j, oa);                                                              \
            K##_PUT(yb + j, ob);                                                              \
        }                                                                                     \
        if (j < n) {                                                                          \
            name##_pairs(j, n, ya, yb, xa, xb, ca, cb, sa, sb);                               \
        }                                                                                     \
    }
/* `group` heads of one position side by side (a constant where the walk
 * calls it, at most K_GROUP, so the arrays stay in registers): the head k's elements at
 * y + k * ycopy (x + k * xcopy), for each vector of columns the cache
 * loaded (and widened) once, every head's elements loaded, then rotated
 * and stored; a reported lane in any head: the vector's columns of every
 * head by the scalar rows. */
#define ROTATE_VEC_SPLIT_GROUP(name, K, T, C)                                                 \
    static SINPE_INLINE void name##_vgroup(ptrdiff_t n, int group, int same, T *y,            \
                                     ptrdiff_t ycopy, const T *x, ptrdiff_t xcopy,            \
                                     ptrdiff_t second,                                        \
                                     const C *ca, const C *cb, const C *sa, const C *sb)      \
    {                                                                                         \
        ptrdiff_t j = 0;                                                                      \
        for (; j + K##_LANES <= n; j += K##_LANES) {                                          \
            int bad = 0;                                                                      \
            vf low = vf_set1(0.0f);                                                           \
            const K##_V c1 = K##_LOADC(ca + j), s1 = K##_LOADC(sa + j);                       \
            const K##_V c2 = same ? c1 : K##_LOADC(cb + j), s2 = same ? s1 : K##_LOADC(sb + j); \
            K##_V a[K##_GROUP], b[K##_GROUP];                                                 \
            K##_OUT oa[K##_GROUP], ob[K##_GROUP];                                             \
            for (int k = 0; k < group; ++k) {                                                 \
                a[k] = K##_LOAD(x + k * xcopy + j);                                           \
                b[k] = K##_LOAD(x + k * xcopy + second + j);                                  \
            }                                                                                 \
            for (int k = 0; k < group; ++k) {                                                 \
                oa[k] = K##_FINISH(K##_SUB(K##_PROD(a[k], c1), K##_PROD(b[k], s1)));          \
                ob[k] = K##_FINISH(K##_ADD(K##_PROD(b[k], c2), K##_PROD(a[k], s2)));          \
            }                                                                                 \
            (void)bad;                                                                        \
            (void)low;                                                                        \
            if (bad || K##_LOW_BAD(low)) {                                                    \
                for (int k = 0; k < group; ++k) {                                             \
                    name##_pairs(j, j + K##_LANES, y + k * ycopy, y + k * ycopy + second,     \
                                 x + k * xcopy, x + k * xcopy + second, ca, cb, sa, sb);      \
                }                                                                             \
                continue;                                                                     \
            }                                                                                 \
            for (int k = 0; k < group; ++k) {                                                 \
                K##_PUT(y + k * ycopy + j, oa[k]);                                            \
                K##_PUT(y + k * ycopy + second + j, ob[k]);                                   \
            }                                                                                 \
        }                                                                                     \
        for (int k = 0; j < n && k < group; ++k) {                                            \
            name##_pairs(j, n, y + k * ycopy, y + k * ycopy + second, x + k * xcopy,          \
                         x + k * xcopy + second, ca, cb, sa, sb);                             \
        }                                                                                     \
    }

/* ROTATE_KERNEL's calls (n, same, in place: constants in a walk; copy
 * strides in elements: sinpe_rotate_rows checked they are whole) */
#define VEC_SPLIT_ROW_CALL(name, T, y, x, c, s)                                               \
    {                                                                                         \
        const T *x_ = x != NULL ? x : y;                                                      \
        name##_vrow(n, same, y, y + x_second, x_, x_ + x_second, c, c + c_second, s,          \
                    s + c_second);                                                            \
    }
#define VEC_SPLIT_GROUP_CALL(name, T, y, x, c, s, group)                                      \
    name##_vgroup(n, group, same, y, dst_copy / (ptrdiff_t)sizeof(T), x != NULL ? x : y,      \
                  x != NULL ? src_copy / (ptrdiff_t)sizeof(T) : dst_copy / (ptrdiff_t)sizeof(T), \
                  x_second, c, c + c_second, s, s + c_second);

/* Interleaved rows: the 2n elements of y from x (x == y in place), K_LANES
 * elements (whole pairs) a vector. */
#define ROTATE_VEC_INTERLEAVED(name, K, T, C)                                                 \
    static inline void name##_pairs(ptrdiff_t from, ptrdiff_t to, T *y, const T *x,           \
                                    const C *c, const C *s)                                   \
    {                                                                                         \
        if (x == y) {                                                                         \
            name##_row(to - from, y + 2 * from, c + 2 * from, s + 2 * from);                  \
        } else {                                                                              \
            name##_row_from(to - from, y + 2 * from, x + 2 * from, c + 2 * from,              \
                            s + 2 * from);                                                    \
        }                                                                                     \
    }                                                                                         \
    static SINPE_INLINE void name##_vrow(ptrdiff_t n, T *y, const T *x, const C *c, const C *s)     \
    {                                                                                         \
        ptrdiff_t e = 0;                                                                      \
        for (; e + K##_LANES <= 2 * n; e += K##_LANES) {                                      \
            int bad = 0;                                                                      \
            vf low = vf_set1(0.0f);                                                           \
            const K##_V v = K##_LOAD(x + e), cv = K##_LOADC(c + e), sv = K##_LOADC(s + e);    \
            const K##_OUT o = K##_PAIRS(v, cv, sv);                                           \
            (void)bad;                                                                        \
            (void)low;                                                                        \
            if (bad || K##_LOW_BAD(low)) {                                                    \
                name##_pairs(e / 2, (e + K##_LANES) / 2, y, x, c, s);                         \
                continue;                                                                     \
            }                                                                                 \
            K##_PUT(y + e, o);                                                                \
        }                                                                                     \
        if (e < 2 * n) {                                                                      \
            name##_pairs(e / 2, n, y, x, c, s);                                               \
        }                                                                                     \
    }
#define ROTATE_VEC_INTERLEAVED_GROUP(name, K, T, C)                                           \
    static SINPE_INLINE void name##_vgroup(ptrdiff_t n, int group, T *y, ptrdiff_t ycopy,     \
                                     const T *x, ptrdiff_t xcopy, const C *c, const C *s)     \
    {                                                                                         \
        ptrdiff_t e = 0;                                                                      \
        for (; e + K##_LANES <= 2 * n; e += K##_LANES) {                                      \
            int bad = 0;                                                                      \
            vf low = vf_set1(0.0f);                                                           \
            const K##_V cv = K##_LOADC(c + e), sv = K##_LOADC(s + e);                         \
            K##_V v[K##_GROUP];                                                               \
            K##_OUT o[K##_GROUP];                                                             \
            for (int k = 0; k < group; ++k) {                                                 \
                v[k] = K##_LOAD(x + k * xcopy + e);                                           \
            }                                                                                 \
            for (int k = 0; k < group; ++k) {                                                 \
                o[k] = K##_PAIRS(v[k], cv, sv);                                               \
            }                                                                                 \
            (void)bad;                                                                        \
            (void)low;                                                                        \
            if (bad || K##_LOW_BAD(low)) {                                                    \
                for (int k = 0; k < group; ++k) {                                             \
                    name##_pairs(e / 2, (e + K##_LANES) / 2, y + k * ycopy, x + k * xcopy, c, \
                                 s);                                                          \
                }                                                                             \
                continue;                                                                     \
            }                                                                                 \
            for (int k = 0; k < group; ++k) {                                                 \
                K##_PUT(y + k * ycopy + e, o[k]);                                             \
            }                                                                                 \
        }                                                                                     \
        for (int k = 0; e < 2 * n && k < group; ++k) {                                        \
            name##_pairs(e / 2, n, y + k * ycopy, x + k * xcopy, c, s);                       \
        }                                                                                     \
    }
#define VEC_INTERLEAVED_ROW_CALL(name, T, y, x, c, s) name##_vrow(n, y, x != NULL ? x : y, c, s);
#define VEC_INTERLEAVED_GROUP_CALL(name, T, y, x, c, s, group)                                \
    name##_vgroup(n, group, y, dst_copy / (ptrdiff_t)sizeof(T), x != NULL ? x : y,            \
                  x != NULL ? src_copy / (ptrdiff_t)sizeof(T) : dst_copy / (ptrdiff_t)sizeof(T), \
                  c, s);

/* The exact rotations' element types (kernels/vec.h's doubles): the
 * products and the sum in double, rounded once. */
#define XF32_V vdd
#define XF32_OUT vf
#define XF32_LANES VF_LANES
#define XF32_LOAD(p) vdd_of(vf_load(p))
#define XF32_LOADC vdd_load
#define XF32_PROD(x, c) vdd_mul(x, c)
#define XF32_SUB vdd_sub
#define XF32_ADD vdd_add
#define XF32_FINISH(v) vf_of_vd((v).lo, (v).hi)
#define XF32_PUT(p, o) vf_store(p, o)
#define XF32_LOW_BAD(low) 0
#define XF32_PAIRS(v, c, s) XF32_FINISH(vdd_pairs(v, c, s))

#define XBF16_V vdd
#define XBF16_OUT vh
#define XBF16_LANES VF_LANES
#define XBF16_LOAD(p) vdd_of(seq_widen_bf16(p))
#define XBF16_LOADC vdd_load
#define XBF16_PROD(x, c) vdd_mul(x, c)
#define XBF16_SUB vdd_sub
#define XBF16_ADD vdd_add
#define XBF16_FINISH(v) seq_narrow_bf16(vf_odd_of_vd((v).lo, (v).hi), &bad)
#define XBF16_PUT(p, o) vh_store(p, o)
#define XBF16_LOW_BAD(low) 0
#define XBF16_PAIRS(v, c, s) XBF16_FINISH(vdd_pairs(v, c, s))
#define XBF16_GROUP X16_GROUP

#define XF16_V vdd
#define XF16_OUT vh
#define XF16_LANES VF_LANES
#define XF16_LOAD(p) vdd_of(seq_widen_f16(p))
#define XF16_LOADC vdd_load
#define XF16_PROD(x, c) vdd_mul(x, c)
#define XF16_SUB vdd_sub
#define XF16_ADD vdd_add
#define XF16_FINISH(v) seq_narrow_f16(vf_odd_of_vd((v).lo, (v).hi), &bad)
#define XF16_PUT(p, o) vh_store(p, o)
#define XF16_LOW_BAD(low) 0
#define XF16_PAIRS(v, c, s) XF16_FINISH(vdd_pairs(v, c, s))
#define XF16_GROUP X16_GROUP
