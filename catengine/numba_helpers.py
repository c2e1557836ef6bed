"""Small numba building blocks shared by the compiled kernels of both packages.

``horner`` evaluates a polynomial with constant coefficients (the polynomial ``exp`` and ``atanh``
of ``catengine.models.kernels``, the ``erfcx`` expansion of the LaRT kernels); ``lane_sums`` and
``lanes_total`` sum an array in eight interleaved partial sums, a fixed order that vectorises
without reassociation (numpy's own summation order in the cBMM priors, the design draws of item
selection). All are inlined into the calling kernel (``inline="always"``) and compiled with its
``fastmath`` flags: call them from kernels that fix the flags they need.
"""

from __future__ import annotations

from catengine.numba_cache import njit

__all__ = ["horner", "lane_sums", "lanes_total"]

_INLINE_OPTS = dict(cache=True, inline="always", nogil=True, error_model="numpy")


@njit(**_INLINE_OPTS)
def horner(x, coeffs):
    """coeffs[0] x^n + coeffs[1] x^(n - 1) + ... + coeffs[n] by Horner's rule, one multiply-add a
    coefficient (``coeffs``: a tuple of floats, highest degree first; a global tuple is a constant
    of the compiled code, and the loop unrolls)."""
    p = coeffs[0]
    for k in range(1, len(coeffs)):
        p = p * x + coeffs[k]
    return p


@njit(**_INLINE_OPTS)
def lane_sums(x, start, stop, lanes):
    """The eight partial sums ``lanes`` (a tuple) with x[start:stop] added lane by lane (stop - start a
    multiple of 8): lane l takes x[start + l], x[start + 8 + l], ... in turn."""
    s0, s1, s2, s3, s4, s5, s6, s7 = lanes
    for k in range(start, stop, 8):
        s0 += x[k]
        s1 += x[k + 1]
        s2 += x[k + 2]
        s3 += x[k + 3]
        s4 += x[k + 4]
        s5 += x[k + 5]
        s6 += x[k + 6]
        s7 += x[k + 7]
    return s0, s1, s2, s3, s4, s5, s6, s7


@njit(**_INLINE_OPTS)
def lanes_total(lanes):
    """The eight partial sums ``lanes`` added pairwise: ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7))."""
    s0, s1, s2, s3, s4, s5, s6, s7 = lanes
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
