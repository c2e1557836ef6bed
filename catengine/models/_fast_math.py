"""Vectorisable numba primitives shared by compiled kernels (cBMM, LaRT SAEM, the score sums).

LLVM cannot vectorise calls to libm's ``exp``; these helpers are plain arithmetic and bit moves,
so loops that call them vectorise. They are compiled without reassociation (``fastmath`` limited
to no-NaN/no-inf/no-signed-zero assumptions and fused multiply-add) and inlined by LLVM, which keeps
their own flags inside callers compiled with full ``fastmath``: reassociating the Cody-Waite split
below would undo it.
"""

from __future__ import annotations

import math

from llvmlite import ir
from catengine.numba_cache import njit
from catengine.numba_helpers import horner
from numba.core import types
from numba.extending import intrinsic

EXACT_OPTS = dict(nogil=True, error_model="numpy", fastmath={"nnan", "ninf", "nsz", "contract"})

LOG2E = 1.4426950408889634
LN2_HI = 0.693145751953125
LN2_LO = 1.42860682030941723212e-6
SHIFTER = 6755399441055744.0  # 1.5 * 2^52


@intrinsic
def bits_to_f64(typingctx, x):
    """Reinterpret the bits of an int64 as a float64 (vectorisable, unlike a libm call)."""
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


@intrinsic
def f64_to_bits(typingctx, x):
    """Reinterpret the bits of a float64 as an int64 (vectorisable)."""
    sig = types.int64(types.float64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return sig, codegen


#: 1/12!, 1/11!, ..., 1/1!, 1/0!: the degree-12 Taylor polynomial of exp
_EXP_TAYLOR = tuple(1.0 / math.factorial(k) for k in range(12, -1, -1))
#: 1/21, 1/19, ..., 1/3, 1: the odd series of 2 atanh(s) / (2 s) in s^2
_ATANH_SERIES = tuple(1.0 / (2 * k + 1) for k in range(10, -1, -1))


@njit(cache=True, **EXACT_OPTS)
def exp_neg(x):
    """exp(x) for x <= 0 (arguments below -700 are clamped; exp(-700) ~ 1e-304): Cody-Waite
    reduction and a degree-12 Taylor polynomial, within 4e-16 relative of ``math.exp`` on [-700, 0].

    k = round(x / ln2) comes without a float -> int conversion (AVX2 has no packed one, and LLVM
    split each vector into four scalar conversions each way): adding 1.5 * 2^52 rounds to an
    integer held in the low mantissa bits, whose low 12 bits are k (mod 2^12) and give the exponent
    field of 2^k."""
    x = max(x, -700.0)
    kd = x * LOG2E + SHIFTER
    k = kd - SHIFTER
    f = x - k * LN2_HI - k * LN2_LO  # |f| <= ln2 / 2 (+ rounding)
    return horner(f, _EXP_TAYLOR) * bits_to_f64((f64_to_bits(kd) + 1023) << 52)


@njit(cache=True, inline="always", **EXACT_OPTS)
def two_atanh_small(s):
    """2 atanh(s) for |s| <= 0.1716 (the log(u) = 2 atanh((u - 1) / (u + 1)) reduction of the log
    helpers), by its odd series to s^21: within 1 ulp there (s^23 / 23 < 3e-19)."""
    return 2.0 * s * horner(s * s, _ATANH_SERIES)


_LN2 = 0.6931471805599453
_SQRT2_MINUS_1 = 0.41421356237309503


@njit(cache=True, inline="always", **EXACT_OPTS)
def log1p_unit(e):
    """log(1 + e) for 0 <= e <= 1 (e.g. e = exp(-|z|) in log(1 + exp(-|z|))): log(u) = 2 atanh((u - v)
    / (u + v)) + log(v) with u = 1 + e and v in {1, 2}, so that |(u - v) / (u + v)| <= 0.1716 and
    :func:`two_atanh_small` applies (< 1e-16 relative)."""
    big = e > _SQRT2_MINUS_1
    s = (e - 1.0) / (e + 3.0) if big else e / (2.0 + e)
    return (_LN2 if big else 0.0) + two_atanh_small(s)


@njit(cache=True, inline="always", **EXACT_OPTS)
def pade_exp_parts(y):
    """(2^k, N(f), N(-f)) with exp(y) = 2^k N(f) / N(-f), for -700 <= y <= 0: the Cody-Waite reduction
    y = k ln2 + f (|f| <= ln2 / 2; the exponent bias rides in the shifter, so the low 12 bits of kd
    are k + 1023, in [13, 1023]) and N the [6/6] Pade numerator of exp (relative error < 1e-18 on f),
    split into its even and odd parts: N(+-f) = ev +- od."""
    kd = y * LOG2E + (SHIFTER + 1023.0)
    k = kd - (SHIFTER + 1023.0)
    f = y - k * LN2_HI - k * LN2_LO
    f2 = f * f
    ev = ((f2 * (1.0 / 665280.0) + 1.0 / 792.0) * f2 + 5.0 / 44.0) * f2 + 1.0
    od = f * ((f2 * (1.0 / 15840.0) + 1.0 / 66.0) * f2 + 0.5)
    return bits_to_f64(f64_to_bits(kd) << 52), ev + od, ev - od


@njit(cache=True, **EXACT_OPTS)
def sigmoid_pair(x, w):
    """(q, e q) with e = w exp(-|x|) and q = 1 / (1 + e): for w = 1, sigmoid(|x|) and sigmoid(-|x|).

    One division for both: exp(f) = N(f) / N(-f) on the Cody-Waite remainder f (|f| <= ln2 / 2),
    N the [6/6] Pade numerator of exp (relative error < 1e-18 there), so with s = w 2^k,
    e q = s N(f) / (N(-f) + s N(f)) and q = 1 - e q (exactly 1 where w = 0). Within 3 ulp of
    scipy's expit for |x| <= 700 (seven multiply-adds instead of the thirteen of ``exp_neg``'s
    polynomial, and a shorter dependency chain). ``w`` is 0 or 1 (the cell's weight)."""
    scale, numerator, denominator = pade_exp_parts(max(-abs(x), -700.0))
    num = (w * scale) * numerator
    eq = num / (denominator + num)
    return 1.0 - eq, eq
