/*
 * n**e for the frequencies, correctly rounded, without the platform's libm.
 *
 * Why not libm: pow's last bit differs between libms (mingw's
 * pow(1e4, -446/512) is one ulp off glibc's), and a table's bits must be a
 * function of its arguments alone on every platform.  The only result that
 * every platform can agree on is the correctly rounded one, so this file
 * computes n**e for the double e to well past double precision and rounds
 * once.
 *
 * Domain: n in [1, 1e30] (SINPE_MIN_BASE .. SINPE_MAX_BASE) and e in [-1, 0],
 * so t = e * ln n lies in [-69.1, 0] and n**e in [1e-30, 1]: no overflow, no
 * subnormals.  (The code holds for any normal n > 0 and |t| < 88, but only
 * the domain above is analysed and tested.)
 *
 * Method, with double-double numbers (hi + lo, an unevaluated sum):
 *  - Once per table, ln n = LN.hi + LN.lo: n = 2**E * m with m in
 *    [sqrt(1/2), sqrt(2)], ln m = 2 atanh(s), s = (m - 1) / (m + 1),
 *    |s| <= 0.1716, by the series s + s**3/3 + ... to s**41 (the terms
 *    past s**19 in double), all in double-double; E ln 2 with ln 2 cut into
 *    42-bit pieces, so E times each piece is exact.  Absolute error below
 *    2**-99.9 (mostly the rounding of LN.lo itself, whose ulp is 2**-99 for
 *    n near 1e30).
 *  - Per e: t = e * LN.hi exactly (Dekker's product, Veltkamp splitting)
 *    plus e * LN.lo.  Reduction t = N ln2/64 + r, N = round(t * 64/ln2),
 *    with ln2/64 cut into two 40-bit pieces (N * piece exact, |N| < 2**13)
 *    and a third; r = r.hi + r.lo, |r| <= ln2/128 + 2**-30, absolute error
 *    below 2**-97.8 (the low parts' roundings near 2**-46, at |t| ~ 69).
 *    n**e = 2**(N div 64) * 2**((N mod 64)/64) * exp(r), the middle factor
 *    from a table of 64 double-doubles.
 *  - Fast path: exp(r) - 1 - r.hi by a degree-7 Taylor polynomial in double,
 *    T * exp(r) assembled as a double-double with T.hi * r.hi exact.
 *    Relative error below 2**-64 (measured: 2**-66.8).  Rounding test: if
 *    y - 2**-63 y and y + 2**-63 y round to the same double, that double is
 *    the correctly rounded result (rounding is monotonic).  Otherwise, about
 *    1 call in 700, the accurate path decides.
 *  - Accurate path: the same reduction, exp(r) by a degree-10 polynomial in
 *    double-double Horner form (degrees 6 to 10 in double), T * exp(r) as a
 *    double-double product.  Relative error below 2**-97 (measured:
 *    2**-98.8), so the result is the correctly rounded n**e unless n**e lies
 *    within 2**-97 (relative) of a midpoint between two doubles.  No input
 *    in the domain is exactly a midpoint (if n**e is dyadic, it is a power
 *    of two: e = -a / 2**b and n = M 2**E, M odd, give M = 1 or a = 0), and
 *    a given value is that close to one with probability about 2**-44.
 *  - Scaling by 2**(N div 64) is exact (no overflow or underflow), so it
 *    commutes with the rounding.
 * The error terms are tallied next to the code that makes them.
 *
 * Deterministic: only IEEE double +, -, *, / and compares, exact int <->
 * double conversions and bit copies through memcpy; no libm call, no long
 * double, no FMA.  Veltkamp's splitting and Dekker's products need every
 * product rounded on its own (a fused 134217729 * a - a would break the
 * split): GCC gets -ffp-contract=off from the build, Clang and MSVC the
 * pragmas below.  Every operation rounds to nearest double (SSE2 on
 * x86-64, NEON on aarch64; x87 extended precision, FLT_EVAL_METHOD 2,
 * would break it), so every compiler, CPU and SIMD width gives the same
 * bits.
 */
#ifndef SINPE_POW_H
#define SINPE_POW_H

#include <stdint.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(_MSC_VER)
#pragma fp_contract(off)
#endif

typedef struct {
    double hi, lo;
} sinpe_dd;

/* a = hi + lo, each with at most 26 significant bits, so that a product of
 * two halves is exact (Veltkamp's splitting; |a| < 2**995). */
static inline sinpe_dd sinpe_dd_split(double a)
{
    const double c = 134217729.0 * a; /* 2**27 + 1 */
    sinpe_dd s;
    s.hi = c - (c - a);
    s.lo = a - s.hi;
    return s;
}

/* a * b = hi + lo exactly (Dekker), a and b given with their splits. */
static inline sinpe_dd sinpe_dd_mul_split(double a, sinpe_dd as, double b, sinpe_dd bs)
{
    sinpe_dd p;
    p.hi = a * b;
    p.lo = (((as.hi * bs.hi - p.hi) + as.hi * bs.lo) + as.lo * bs.hi) + as.lo * bs.lo;
    return p;
}

static inline sinpe_dd sinpe_dd_two_prod(double a, double b)
{
    return sinpe_dd_mul_split(a, sinpe_dd_split(a), b, sinpe_dd_split(b));
}

/* a + b = hi + lo exactly, whatever the magnitudes (Knuth's TwoSum). */
static inline sinpe_dd sinpe_dd_two_sum(double a, double b)
{
    sinpe_dd s;
    s.hi = a + b;
    const double bb = s.hi - a;
    s.lo = (a - (s.hi - bb)) + (b - bb);
    return s;
}

/* The same when |a| >= |b| or a == 0 (Dekker's Fast2Sum). */
static inline sinpe_dd sinpe_dd_fast_sum(double a, double b)
{
    sinpe_dd s;
    s.hi = a + b;
    s.lo = b - (s.hi - a);
    return s;
}

/* x * y, relative error below 2**-103 (x.lo * y.lo dropped, three
 * roundings near 2**-106 of the result). */
static inline sinpe_dd sinpe_dd_mul(sinpe_dd x, sinpe_dd y)
{
    const sinpe_dd p = sinpe_dd_two_prod(x.hi, y.hi);
    return sinpe_dd_fast_sum(p.hi, p.lo + (x.hi * y.lo + x.lo * y.hi));
}

/* x * b, relative error below 2**-105. */
static inline sinpe_dd sinpe_dd_mul_d(sinpe_dd x, double b)
{
    const sinpe_dd p = sinpe_dd_two_prod(x.hi, b);
    return sinpe_dd_fast_sum(p.hi, p.lo + x.lo * b);
}

/* x + y where |y| is well below |x| or of the same sign (no cancellation):
 * relative error below 2**-104. */
static inline sinpe_dd sinpe_dd_add(sinpe_dd x, sinpe_dd y)
{
    const sinpe_dd s = sinpe_dd_two_sum(x.hi, y.hi);
    return sinpe_dd_fast_sum(s.hi, s.lo + (x.lo + y.lo));
}

/* ln n of a base, with its high part split for the exact products e * hi. */
typedef struct {
    sinpe_dd ln, ln_hi_split;
} sinpe_pow_base;

/* ln 2 in three pieces: the first two have 42 significant bits, so E times
 * either is exact for |E| < 2**11.  mpmath, mp.prec = 200:
 *   s = lambda x, b: float(mp.ldexp(mp.nint(mp.ldexp(x, b - mp.frexp(x)[1])),
 *                                   mp.frexp(x)[1] - b))
 *   l = log(2); l1 = s(l, 42); l2 = s(l - l1, 42); float(l - l1 - l2) */
#define SINPE_POW_LN2_1 0x1.62e42fefa3800p-1
#define SINPE_POW_LN2_2 0x1.ef35793c76800p-45
#define SINPE_POW_LN2_3 -0x1.9ff0342542fc3p-90

static inline sinpe_pow_base sinpe_pow_prepare(double n)
{
    /* n = 2**E * m, m in [1, 2) from the bits (n is normal and positive). */
    uint64_t bits;
    memcpy(&bits, &n, sizeof bits);
    int exponent = (int)(bits >> 52) - 1023;
    bits = (bits & UINT64_C(0x000fffffffffffff)) | UINT64_C(0x3ff0000000000000);
    double m;
    memcpy(&m, &bits, sizeof m);
    if (m > 0x1.6a09e667f3bcdp+0) { /* sqrt(2) */
        m *= 0.5;
        exponent += 1;
    }

    /* s = (m - 1) / (m + 1) as a double-double: m - 1 is exact (Sterbenz),
     * m + 1 exact as a double-double; one correction step of the quotient
     * (the remainder f - s.hi * g.hi is a double, and computed exactly). */
    const double f = m - 1.0;
    const sinpe_dd g = sinpe_dd_two_sum(m, 1.0);
    sinpe_dd s;
    s.hi = f / g.hi;
    const sinpe_dd sg = sinpe_dd_two_prod(s.hi, g.hi);
    s.lo = (((f - sg.hi) - sg.lo) - s.hi * g.lo) / g.hi;

    /* ln m = 2 (s + s z Q(z)), z = s**2 <= 0.0295, Q(z) = sum z**i / (2i + 3)
     * for i <= 19 (the next term adds below 2**-110).  Terms i >= 9 (below
     * 2**-50 of Q) in double: their rounding stays below 2**-103 of Q.  The
     * others with double-double coefficients.  mpmath, mp.prec = 200:
     *   [(float(x), float(x - float(x))) for x in (1 / mpf(2 * i + 3) for i in range(9))] */
    static const sinpe_dd inverse_odd[9] = {
        {0x1.5555555555555p-2, 0x1.5555555555555p-56}, {0x1.999999999999ap-3, -0x1.999999999999ap-57},
        {0x1.2492492492492p-3, 0x1.2492492492492p-57}, {0x1.c71c71c71c71cp-4, 0x1.c71c71c71c71cp-58},
        {0x1.745d1745d1746p-4, -0x1.745d1745d1746p-59}, {0x1.3b13b13b13b14p-4, -0x1.3b13b13b13b14p-58},
        {0x1.1111111111111p-4, 0x1.1111111111111p-60}, {0x1.e1e1e1e1e1e1ep-5, 0x1.e1e1e1e1e1e1ep-61},
        {0x1.af286bca1af28p-5, 0x1.af286bca1af28p-59},
    };
    const sinpe_dd z = sinpe_dd_mul(s, s);
    double tail = 1.0 / 41.0;
    for (int i = 18; i >= 9; --i) {
        tail = 1.0 / (double)(2 * i + 3) + z.hi * tail;
    }
    sinpe_dd q = {tail, 0.0};
    for (int i = 8; i >= 0; --i) {
        q = sinpe_dd_add(inverse_odd[i], sinpe_dd_mul(z, q));
    }
    const sinpe_dd half_ln_m = sinpe_dd_add(s, sinpe_dd_mul(sinpe_dd_mul(s, z), q));

    /* + E ln 2: E * LN2_1 and E * LN2_2 exact, the sums exact but the last
     * (the rounding of the low part, below 2**-100 for |ln n| < 128). */
    const double e = (double)exponent;
    const sinpe_dd h = sinpe_dd_two_sum(e * SINPE_POW_LN2_1, 2.0 * half_ln_m.hi);
    const sinpe_dd h2 = sinpe_dd_two_sum(h.lo, e * SINPE_POW_LN2_2);
    const sinpe_dd top = sinpe_dd_fast_sum(h.hi, h2.hi);
    sinpe_pow_base base;
    base.ln = sinpe_dd_fast_sum(top.hi, top.lo + ((h2.lo + 2.0 * half_ln_m.lo) +
                                                  e * SINPE_POW_LN2_3));
    base.ln_hi_split = sinpe_dd_split(base.ln.hi);
    return base;
}

/* 2**(j/64), j < 64, as double-doubles.  mpmath, mp.prec = 200:
 *   [(float(x), float(x - float(x))) for x in (mpf(2) ** (mpf(j) / 64) for j in range(64))] */
static const sinpe_dd sinpe_pow_table[64] = {
    {0x1.0000000000000p+0, 0x0.0p+0}, {0x1.02c9a3e778061p+0, -0x1.19083535b085dp-56},
    {0x1.059b0d3158574p+0, 0x1.d73e2a475b465p-55}, {0x1.0874518759bc8p+0, 0x1.186be4bb284ffp-57},
    {0x1.0b5586cf9890fp+0, 0x1.8a62e4adc610bp-54}, {0x1.0e3ec32d3d1a2p+0, 0x1.03a1727c57b53p-59},
    {0x1.11301d0125b51p+0, -0x1.6c51039449b3ap-54}, {0x1.1429aaea92de0p+0, -0x1.32fbf9af1369ep-54},
    {0x1.172b83c7d517bp+0, -0x1.19041b9d78a76p-55}, {0x1.1a35beb6fcb75p+0, 0x1.e5b4c7b4968e4p-55},
    {0x1.1d4873168b9aap+0, 0x1.e016e00a2643cp-54}, {0x1.2063b88628cd6p+0, 0x1.dc775814a8495p-55},
    {0x1.2387a6e756238p+0, 0x1.9b07eb6c70573p-54}, {0x1.26b4565e27cddp+0, 0x1.2bd339940e9d9p-55},
    {0x1.29e9df51fdee1p+0, 0x1.612e8afad1255p-55}, {0x1.2d285a6e4030bp+0, 0x1.0024754db41d5p-54},
    {0x1.306fe0a31b715p+0, 0x1.6f46ad23182e4p-55}, {0x1.33c08b26416ffp+0, 0x1.32721843659a6p-54},
    {0x1.371a7373aa9cbp+0, -0x1.63aeabf42eae2p-54}, {0x1.3a7db34e59ff7p+0, -0x1.5e436d661f5e3p-56},
    {0x1.3dea64c123422p+0, 0x1.ada0911f09ebcp-55}, {0x1.4160a21f72e2ap+0, -0x1.ef3691c309278p-58},
    {0x1.44e086061892dp+0, 0x1.89b7a04ef80d0p-59}, {0x1.486a2b5c13cd0p+0, 0x1.3c1a3b69062f0p-56},
    {0x1.4bfdad5362a27p+0, 0x1.d4397afec42e2p-56}, {0x1.4f9b2769d2ca7p+0, -0x1.4b309d25957e3p-54},
    {0x1.5342b569d4f82p+0, -0x1.07abe1db13cadp-55}, {0x1.56f4736b527dap+0, 0x1.9bb2c011d93adp-54},
    {0x1.5ab07dd485429p+0, 0x1.6324c054647adp-54}, {0x1.5e76f15ad2148p+0, 0x1.ba6f93080e65ep-54},
    {0x1.6247eb03a5585p+0, -0x1.383c17e40b497p-54}, {0x1.6623882552225p+0, -0x1.bb60987591c34p-54},
    {0x1.6a09e667f3bcdp+0, -0x1.bdd3413b26456p-54}, {0x1.6dfb23c651a2fp+0, -0x1.bbe3a683c88abp-57},
    {0x1.71f75e8ec5f74p+0, -0x1.16e4786887a99p-55}, {0x1.75feb564267c9p+0, -0x1.0245957316dd3p-54},
    {0x1.7a11473eb0187p+0, -0x1.41577ee04992fp-55}, {0x1.7e2f336cf4e62p+0, 0x1.05d02ba15797ep-56},
    {0x1.82589994cce13p+0, -0x1.d4c1dd41532d8p-54}, {0x1.868d99b4492edp+0, -0x1.fc6f89bd4f6bap-54},
    {0x1.8ace5422aa0dbp+0, 0x1.6e9f156864b27p-54}, {0x1.8f1ae99157736p+0, 0x1.5cc13a2e3976cp-55},
    {0x1.93737b0cdc5e5p+0, -0x1.75fc781b57ebcp-57}, {0x1.97d829fde4e50p+0, -0x1.d185b7c1b85d1p-54},
    {0x1.9c49182a3f090p+0, 0x1.c7c46b071f2bep-56}, {0x1.a0c667b5de565p+0, -0x1.359495d1cd533p-54},
    {0x1.a5503b23e255dp+0, -0x1.d2f6edb8d41e1p-54}, {0x1.a9e6b5579fdbfp+0, 0x1.0fac90ef7fd31p-54},
    {0x1.ae89f995ad3adp+0, 0x1.7a1cd345dcc81p-54}, {0x1.b33a2b84f15fbp+0, -0x1.2805e3084d708p-57},
    {0x1.b7f76f2fb5e47p+0, -0x1.5584f7e54ac3bp-56}, {0x1.bcc1e904bc1d2p+0, 0x1.23dd07a2d9e84p-55},
    {0x1.c199bdd85529cp+0, 0x1.11065895048ddp-55}, {0x1.c67f12e57d14bp+0, 0x1.2884dff483cadp-54},
    {0x1.cb720dcef9069p+0, 0x1.503cbd1e949dbp-56}, {0x1.d072d4a07897cp+0, -0x1.cbc3743797a9cp-54},
    {0x1.d5818dcfba487p+0, 0x1.2ed02d75b3707p-55}, {0x1.da9e603db3285p+0, 0x1.c2300696db532p-54},
    {0x1.dfc97337b9b5fp+0, -0x1.1a5cd4f184b5cp-54}, {0x1.e502ee78b3ff6p+0, 0x1.39e8980a9cc8fp-55},
    {0x1.ea4afa2a490dap+0, -0x1.e9c23179c2893p-54}, {0x1.efa1bee615a27p+0, 0x1.dc7f486a4b6b0p-54},
    {0x1.f50765b6e4540p+0, 0x1.9d3e12dd8a18bp-54}, {0x1.fa7c1819e90d8p+0, 0x1.74853f3a5931ep-55},
};

/* ln2/64 in three pieces, the first two with at most 40 significant bits,
 * so N times either is exact for |N| < 2**13.  mpmath, mp.prec = 200, s as
 * for SINPE_POW_LN2_1:
 *   c = log(2) / 64; c1 = s(c, 40); c2 = s(c - c1, 40); float(c - c1 - c2) */
#define SINPE_POW_C1 0x1.62e42fefa4000p-7
#define SINPE_POW_C2 -0x1.8432a1b0e2000p-49
#define SINPE_POW_C3 -0x1.8cff81a12a17ep-91
#define SINPE_POW_64_OVER_LN2 0x1.71547652b82fep+6

/* e * ln n = N ln2/64 + r.  Returns r; *index = N mod 64, *scale =
 * 2**(N div 64). */
static inline sinpe_dd sinpe_pow_reduce(const sinpe_pow_base *base, double e, uint64_t *index,
                                        double *scale)
{
    /* t = p.hi + tl: p exact (|p.lo| <= 2**-47 for |t| < 128), tl rounded
     * twice near 2**-46: 2**-100 each, and e * ln.lo below 2**-101. */
    const sinpe_dd p = sinpe_dd_mul_split(e, sinpe_dd_split(e), base->ln.hi, base->ln_hi_split);
    const double tl = p.lo + e * base->ln.lo;
    /* Adding 1.5 * 2**52 rounds to the nearest integer N (the nearest to
     * t * 64/ln2 but for 2**-40, so |r| <= ln2/128 + 2**-30) and leaves the
     * bits 0x4338000000000000 + N. */
    const double shifter = 0x1.8p52;
    const double shifted = p.hi * SINPE_POW_64_OVER_LN2 + shifter;
    const double nd = shifted - shifter;
    /* p.hi - N * C1 is exact: N * C1 is exact, and for N != 0 both are
     * multiples of 2**-60 (|p.hi| >= 2**-8) with a difference below 2**-7. */
    const double a = p.hi - nd * SINPE_POW_C1;
    const sinpe_dd b = sinpe_dd_two_sum(a, -(nd * SINPE_POW_C2)); /* exact */
    /* two more roundings near 2**-46 (2**-100 each); N * C3 below 2**-77 */
    const sinpe_dd r = sinpe_dd_two_sum(b.hi, b.lo + (tl - nd * SINPE_POW_C3));
    /* N div 64 and N mod 64 from the bits, in unsigned (wrapping) arithmetic:
     * 0x4338000000000000 is a multiple of 64.  The exponent field of
     * 2**(N div 64) is (N div 64) + 1023, in [895, 1151] for |t| < 88. */
    uint64_t bits;
    memcpy(&bits, &shifted, sizeof bits);
    *index = bits & 63;
    const uint64_t scale_bits = ((bits >> 6) - (UINT64_C(0x4338000000000000) >> 6) + 1023) << 52;
    memcpy(scale, &scale_bits, sizeof *scale);
    return r;
}

/* n**e when the fast path can round it surely, else a negative number.
 * Branch-free (a select between two computed values, then one multiply),
 * so a loop over it vectorises. */
static inline double sinpe_pow_fast(const sinpe_pow_base *base, double e)
{
    uint64_t j;
    double scale;
    const sinpe_dd r = sinpe_pow_reduce(base, e, &j, &scale);
    const double x = r.hi;
    /* exp(x) - 1 - x = x**2 (1/2 + x/6 + ... + x**5/5040): truncation below
     * 2**-75, |p| <= 2**-16.06, three roundings of about 2**-53 of p. */
    const double p = x * x * (0.5 + x * (0x1.5555555555555p-3 +
                                        x * (0x1.5555555555555p-5 +
                                             x * (0x1.1111111111111p-7 +
                                                  x * (0x1.6c16c16c16c17p-10 +
                                                       x * 0x1.a01a01a01a01ap-13)))));
    /* T * exp(r) = T.hi (1 + x + p + r.lo) + T.lo (1 + x), dropping
     * T.hi * r.lo * x and T.lo * p (below 2**-68 each); T.hi + T.hi * x
     * exact as a double-double, the rest (below 2**-15) rounded five times
     * (2**-68 each). */
    const sinpe_dd t = sinpe_pow_table[j];
    const sinpe_dd tx = sinpe_dd_two_prod(t.hi, x);
    const sinpe_dd y = sinpe_dd_fast_sum(t.hi, tx.hi);
    const double lo = y.lo + (tx.lo + (t.lo * (1.0 + x) + t.hi * (p + r.lo)));
    /* The total is below 2**-64 of y; y.hi + lo - err and y.hi + lo + err
     * bracket the exact value even after rounding lo +- err (2**-67). */
    const double err = y.hi * 0x1p-63;
    const double down = y.hi + (lo - err);
    const double up = y.hi + (lo + err);
    return (down == up ? down : -down) * scale;
}

/* n**e, relative error below 2**-97 before the one rounding. */
static inline double sinpe_pow_accurate(const sinpe_pow_base *base, double e)
{
    uint64_t j;
    double scale;
    const sinpe_dd r = sinpe_pow_reduce(base, e, &j, &scale);
    const double x = r.hi;
    /* exp(x) - 1 = x (1 + x (1/2 + x (1/6 + x (1/24 + x (1/120 + x u(x)))))),
     * u = 1/720 + ... + x**4/10!: truncation below 2**-107; u in double
     * adds below 2**-106; each double-double step below 2**-105. */
    const double u =
        0x1.6c16c16c16c17p-10 +
        x * (0x1.a01a01a01a01ap-13 +
             x * (0x1.a01a01a01a01ap-16 + x * (0x1.71de3a556c734p-19 + x * 0x1.27e4fb7789f5cp-22)));
    static const sinpe_dd inverse_factorial[3] = {
        {0x1.1111111111111p-7, 0x1.1111111111111p-63}, /* 1/120 */
        {0x1.5555555555555p-5, 0x1.5555555555555p-59}, /* 1/24 */
        {0x1.5555555555555p-3, 0x1.5555555555555p-57}, /* 1/6 */
    };
    sinpe_dd acc = sinpe_dd_add(inverse_factorial[0], sinpe_dd_two_prod(u, x));
    acc = sinpe_dd_add(inverse_factorial[1], sinpe_dd_mul_d(acc, x));
    acc = sinpe_dd_add(inverse_factorial[2], sinpe_dd_mul_d(acc, x));
    const sinpe_dd half = {0.5, 0.0}, one = {1.0, 0.0};
    acc = sinpe_dd_add(half, sinpe_dd_mul_d(acc, x));
    acc = sinpe_dd_add(one, sinpe_dd_mul_d(acc, x));
    sinpe_dd ex = sinpe_dd_add(one, sinpe_dd_mul_d(acc, x)); /* exp(x), x > -0.006 */
    /* exp(r) = exp(x) (1 + r.lo), |r.lo| <= 2**-61: r.lo**2 is below 2**-122 */
    ex = sinpe_dd_fast_sum(ex.hi, ex.lo + ex.hi * r.lo);
    const sinpe_dd y = sinpe_dd_mul(sinpe_pow_table[j], ex);
    return (y.hi + y.lo) * scale;
}

/* n**e, correctly rounded (see the top). */
static inline double sinpe_pow(const sinpe_pow_base *base, double e)
{
    const double fast = sinpe_pow_fast(base, e);
    return fast >= 0.0 ? fast : sinpe_pow_accurate(base, e);
}

#endif /* SINPE_POW_H */
