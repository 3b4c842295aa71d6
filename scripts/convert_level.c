/*
 * One SIMD level's vector conversions (csrc/kernels/vec.h on its ISA's
 * header, csrc/kernels/isa/, the exact rotations' too) behind plain
 * functions over arrays, for scripts/convert_check.c.  Built once per
 * level by scripts/convert.sh with that level's -m flags and the macros
 * its level file defines (SINPE_ISA_AVX2, SINPE_ISA_AVX512,
 * SINPE_ISA_BF16; none: the baseline).
 */
#include "core/platform.h"

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/vec.h"

#define PAIR (2 * VF_LANES) /* the elements of one vi */

/* Where each element of a vi lands when widened: map[r * VF_LANES + l] is
 * the element in lane l of register r (0: lo, 1: hi).  Found from the
 * widening itself: element k = the bits k, a small bfloat16 (k << 16 as a
 * float's bits) or a float16 subnormal (k * 2**-24). */
static void lane_map(int f16, int *map)
{
    uint16_t k[PAIR];
    float lanes[PAIR];
    for (int i = 0; i < PAIR; ++i) {
        k[i] = (uint16_t)(i + 1);
    }
    const vi v = vi_load(k);
    const v16f w = f16 ? f16_widen(v) : bf16_widen(v);
    vf_store(lanes, w.lo);
    vf_store(lanes + VF_LANES, w.hi);
    for (int i = 0; i < PAIR; ++i) {
        uint32_t bits;
        memcpy(&bits, &lanes[i], 4);
        map[i] = (f16 ? (int)(lanes[i] * 16777216.0f) : (int)(bits >> 16)) - 1;
    }
}

int level_lanes(void)
{
    return PAIR;
}

/* n elements (a multiple of PAIR) of 16-bit values widened, in element
 * order. */
void level_widen(int f16, const uint16_t *in, float *out, size_t n)
{
    int map[PAIR];
    lane_map(f16, map);
    for (size_t i = 0; i < n; i += PAIR) {
        float lanes[PAIR];
        const v16f w = f16 ? f16_widen(vi_load(in + i)) : bf16_widen(vi_load(in + i));
        vf_store(lanes, w.lo);
        vf_store(lanes + VF_LANES, w.hi);
        for (int l = 0; l < PAIR; ++l) {
            out[i + (size_t)map[l]] = lanes[l];
        }
    }
}

/* n floats (a multiple of PAIR) narrowed in vectors of PAIR elements, in
 * element order; bad[v] the report of vector v. */
void level_narrow(int f16, const float *in, uint16_t *out, unsigned char *bad, size_t n)
{
    int map[PAIR];
    lane_map(f16, map);
    for (size_t i = 0; i < n; i += PAIR) {
        float lanes[PAIR];
        for (int l = 0; l < PAIR; ++l) {
            lanes[l] = in[i + (size_t)map[l]];
        }
        const v16f v = {vf_load(lanes), vf_load(lanes + VF_LANES)};
        int flag = 0;
        const vi y = f16 ? f16_narrow(v, &flag) : bf16_narrow(v, &flag);
        vi_store(out + i, y);
        bad[i / PAIR] = flag != 0;
    }
}

/* n floats (a multiple of VF_LANES) rounded to the format and back. */
void level_round(int f16, const float *in, float *out, unsigned char *bad, size_t n)
{
    for (size_t i = 0; i < n; i += VF_LANES) {
        int flag = 0;
        const vf v = vf_load(in + i);
        vf_store(out + i, f16 ? f16_round(v, &flag) : bf16_round(v, &flag));
        bad[i / VF_LANES] = flag != 0;
    }
}

/* n floats (a multiple of VF_LANES) rounded to bfloat16 by the rotations'
 * split (bf16_round_split); low[i]: element i came out with bits in its
 * low 16, which makes the loops report its vector. */
void level_round_split(const float *in, float *out, unsigned char *low, size_t n)
{
    for (size_t i = 0; i < n; i += VF_LANES) {
        vf acc = vf_set1(0.0f);
        vf_store(out + i, bf16_round_split(vf_load(in + i), &acc));
        for (size_t l = i; l < i + VF_LANES; ++l) {
            uint32_t bits;
            memcpy(&bits, &out[l], 4);
            low[l] = (bits & 0xffffu) != 0;
        }
        const int any = vf_low16_any(acc);
        int each = 0;
        for (size_t l = i; l < i + VF_LANES; ++l) {
            each |= low[l];
        }
        if (any != each) { /* vf_low16_any must see what the lanes hold */
            low[i] = 2;
        }
    }
}
/* The exact rotations' conversions: VF_LANES elements in order. */
void level_seq_widen(int f16, const uint16_t *in, float *out, size_t n)
{
    for (size_t i = 0; i < n; i += VF_LANES) {
        vf_store(out + i, f16 ? seq_widen_f16(in + i) : seq_widen_bf16(in + i));
    }
}

void level_seq_narrow(int f16, const float *in, uint16_t *out, unsigned char *bad, size_t n)
{
    for (size_t i = 0; i < n; i += VF_LANES) {
        int flag = 0;
        const vf v = vf_load(in + i);
        vh_store(out + i, f16 ? seq_narrow_f16(v, &flag) : seq_narrow_bf16(v, &flag));
        bad[i / VF_LANES] = flag != 0;
    }
}

/* n doubles (a multiple of VF_LANES) rounded to float by rounding to odd */
void level_odd(const double *in, float *out, size_t n)
{
    for (size_t i = 0; i < n; i += VF_LANES) {
        const vdd d = vdd_load(in + i);
        vf_store(out + i, vf_odd_of_vd(d.lo, d.hi));
    }
}
