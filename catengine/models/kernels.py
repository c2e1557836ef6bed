"""Public names of the numerically stable scalar primitives (numba ``@njit`` functions of one
float64), for kernels in other packages (e.g. ``calibration.methods.lart._kernels``).

They are callable from Python and from other ``@njit`` code, finite and warning-free on the whole
real line; ``catengine/models/_kernels.py`` defines them (and documents each) together with the
private array kernels of the response models, and ``tests/naive_models.py`` holds their slow
twins. Import them from here, not from the private module.
"""

from catengine.models._kernels import _log_p_4pl as log_p_4pl
from catengine.models._kernels import _weights_4pl as weights_4pl
from catengine.models._kernels import (
    cholesky_in_place,
    cholesky_solve_in_place,
    inv_mills,
    log_phi_cdf,
    log_phi_pdf,
    log_sigmoid,
    logistic_terms,
    phi_cdf,
    phi_pdf,
    probit_curvature,
    probit_info_h,
    probit_terms,
    sigmoid,
)
from catengine.models._fast_math import bits_to_f64, exp_neg, f64_to_bits, log1p_unit, sigmoid_pair, two_atanh_small
from catengine.models.expected_information import _info_z as info_4pl_z

#: ``log_p_4pl(z, c, d)`` -> (log P, log(1 - P)) for P = c + (d - c) sigmoid(z);
#: ``weights_4pl(s, c, d)`` -> ((P - c)/P, (d - P)/(1 - P)) at s = sigmoid(z), without 0/0;
#: ``info_4pl_z(z, a2, c, d)`` -> the 4PL Fisher information a^2 s (1 - s) w1 w0 at logit z;
#: ``cholesky_in_place(a)`` / ``cholesky_solve_in_place(chol, b)``: small SPD systems inside kernels
#: (the score factors' Newton steps, cBMM's rank-r trait steps).
#: Vectorisable primitives (``catengine/models/_fast_math.py``: plain arithmetic and bit moves, so
#: loops calling them vectorise, which loops calling libm's ``exp`` do not): ``exp_neg(x)`` = exp(x)
#: for x <= 0; ``sigmoid_pair(x, w)`` -> (q, e q) with e = w exp(-|x|), q = 1 / (1 + e);
#: ``two_atanh_small(s)`` = 2 atanh(s) for small |s|; ``log1p_unit(e)`` = log(1 + e) for 0 <= e <= 1; ``bits_to_f64`` / ``f64_to_bits`` reinterpret bits.

__all__ = [
    "bits_to_f64",
    "exp_neg",
    "f64_to_bits",
    "log1p_unit",
    "sigmoid_pair",
    "two_atanh_small",
    "cholesky_in_place",
    "cholesky_solve_in_place",
    "info_4pl_z",
    "log_p_4pl",
    "weights_4pl",
    "inv_mills",
    "log_phi_cdf",
    "log_phi_pdf",
    "log_sigmoid",
    "logistic_terms",
    "phi_cdf",
    "phi_pdf",
    "probit_curvature",
    "probit_info_h",
    "probit_terms",
    "sigmoid",
]
