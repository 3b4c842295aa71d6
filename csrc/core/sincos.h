/*
 * sin and cos of one double, written so that a loop calling it vectorises.
 *
 * Why not libm: a libm sin/cos costs ~15 ns and never vectorises; anchors are
 * needed for every 32 rows and every frequency, so libm anchors alone cost
 * more than writing the table.  This version is branch-free (selects, not
 * ifs), uses only +, -, * and compares, so GCC/Clang vectorise a loop over
 * it at any SIMD width and, with -ffp-contract=off, every width (SSE2, AVX2,
 * AVX-512, scalar remainder) gives the same bits.
 *
 * Accuracy: absolute error below ~4e-16 for |x| <= SINPE_SINCOS_MAX_ANGLE,
 * far inside the 2**-24 float32 promise and near libm for float64 output.
 *  - Reduction by q = round(x * 2/pi) against pi/2 split in three (Cody-Waite).
 *    PIO2_1 and PIO2_2 have at most 27 significant bits and |q| < 2**26, so
 *    q * PIO2_1 and q * PIO2_2 are exact without FMA, and x - q * PIO2_1 is
 *    exact (Sterbenz).  The two later subtractions round once each: the
 *    reduced argument is off by at most ~2**-53 absolute.
 *  - fdlibm's __kernel_sin/__kernel_cos minimax polynomials on [-pi/4, pi/4]
 *    (their own error below 2**-58).
 */
#ifndef SINPE_SINCOS_H
#define SINPE_SINCOS_H

/* |x| up to 2**26 keeps |q| < 2**26 (so the products above stay exact). */
#define SINPE_SINCOS_MAX_ANGLE 67108864.0

static inline void sinpe_sincos(double x, double *sin_x, double *cos_x)
{
    /* Adding and subtracting 1.5 * 2**52 rounds to the nearest integer in
     * the current (nearest-even) mode, for any |value| < 2**51. */
    const double shifter = 0x1.8p52;
    const double two_over_pi = 0x1.45f306dc9c883p-1;
    const double pio2_1 = 0x1.921fb54000000p+0; /* 27 bits */
    const double pio2_2 = 0x1.10b4610000000p-30; /* 25 bits */
    const double pio2_3 = 0x1.a62633145c06ep-58; /* the rest, to 2**-111 */

    const double q = (x * two_over_pi + shifter) - shifter;
    const double r = ((x - q * pio2_1) - q * pio2_2) - q * pio2_3;

    const double z = r * r;
    const double s_tail = 8.33333333332248946124e-03 +
        z * (-1.98412698298579493134e-04 +
             z * (2.75573137070700676789e-06 +
                  z * (-2.50507602534068634195e-08 + z * 1.58969099521155010221e-10)));
    const double s = r + (z * r) * (-1.66666666666666324348e-01 + z * s_tail);
    const double c_tail = z * (4.16666666666666019037e-02 +
        z * (-1.38888888888741095749e-03 +
             z * (2.48015872894767294178e-05 +
                  z * (-2.75573143513906633035e-07 +
                       z * (2.08757232129817482790e-09 + z * -1.13596475577881948265e-11)))));
    const double c = 1.0 - (0.5 * z - z * c_tail);

    /* The quadrant m = q mod 4, in doubles so the selects below stay in the
     * double lanes: q / 4 - 0.375 is never a tie, so rounding it is floor. */
    const double q4 = ((q * 0.25 - 0.375) + shifter) - shifter;
    const double m = q - 4.0 * q4;
    const int odd = (m == 1.0) | (m == 3.0);
    const double sv = odd ? c : s;
    const double cv = odd ? s : c;
    *sin_x = m >= 2.0 ? -sv : sv;
    *cos_x = ((m == 1.0) | (m == 2.0)) ? -cv : cv;
}

#endif /* SINPE_SINCOS_H */
