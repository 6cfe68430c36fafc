"""Secure primitives: secure aggregation, prime-field arithmetic, Lagrange coded computing.

:class:`SecureAggregator` gives a protocol the sum of the clients' vectors
and nothing else (pairwise and self masks on a sparse graph, dropout
tolerant, fixed point with a checked range).

:func:`lcc_squared_distances` computes the exact global squared-distance
matrix of horizontally partitioned data from Lagrange-coded shares (the
protocol of OmniFC); the helpers expose the public parameters (encoding matrix,
decoding weights, overflow guard) and the exact modular matrix product it is
built on. The default prime ``2**30 - 35`` gives about 13 bits of precision
on unit-norm rows; :data:`FAST_PRIME` (``2**23 - 15``) halves the work of the
distance round for about three bits less.

The differential-privacy tools calibrate Gaussian noise exactly and account
for every release (:func:`gaussian_sigma`, :class:`PrivacyAccountant`), clip
samples to a norm bound (:func:`clip_rows`, :func:`clip_columns`) and give the
sensitivities and noise scales of FedSC with perturbed data or factors
(:func:`coef_sensitivity`, :func:`dictionary_sensitivity`,
:func:`data_noise_scale`, :func:`factor_noise_scales`,
:func:`relative_noise_scale`).
"""

from ..node._accounting import (
    NEIGHBOURING_RELATIONS,
    BudgetError,
    PrivacyAccountant,
    PrivacyLeakWarning,
    Release,
    gaussian_epsilon,
    gaussian_sigma,
)
from ._audit import audit_epsilon
from ._dp import (
    FactorNoiseScales,
    add_gaussian_noise,
    clip_columns,
    clip_rows,
    coef_norm_bound,
    coef_sensitivity,
    data_noise_scale,
    dictionary_sensitivity,
    factor_noise_scales,
    relative_noise_scale,
)
from ._field import DEFAULT_PRIME, FAST_PRIME, is_prime, mod_inverse, modular_matmul
from ._lcc import (
    decoding_threshold,
    encoding_matrix,
    evaluation_points,
    lagrange_matrix,
    lcc_encode,
    lcc_squared_distances,
    max_safe_precision,
    quantize,
    server_decoding_weights,
)
from ._moments import SumChannel, pooled_moments
from ._secure_sum import (
    MERSENNE_127,
    SecureAggregator,
    SecureSumError,
    default_degree,
    fixed_point_shift,
    harary_neighbours,
    keystream,
    shamir_combine,
    shamir_split,
)
from ._sum_bounds import agree_bound, agree_column_bounds

__all__ = [
    "audit_epsilon",
    "BudgetError",
    "NEIGHBOURING_RELATIONS",
    "PrivacyAccountant",
    "PrivacyLeakWarning",
    "Release",
    "gaussian_epsilon",
    "gaussian_sigma",
    "DEFAULT_PRIME",
    "MERSENNE_127",
    "SecureAggregator",
    "SecureSumError",
    "SumChannel",
    "pooled_moments",
    "agree_bound",
    "agree_column_bounds",
    "default_degree",
    "fixed_point_shift",
    "harary_neighbours",
    "keystream",
    "shamir_combine",
    "shamir_split",
    "FAST_PRIME",
    "FactorNoiseScales",
    "add_gaussian_noise",
    "clip_columns",
    "clip_rows",
    "coef_norm_bound",
    "coef_sensitivity",
    "data_noise_scale",
    "decoding_threshold",
    "dictionary_sensitivity",
    "encoding_matrix",
    "evaluation_points",
    "factor_noise_scales",
    "is_prime",
    "lagrange_matrix",
    "lcc_encode",
    "lcc_squared_distances",
    "max_safe_precision",
    "mod_inverse",
    "modular_matmul",
    "quantize",
    "relative_noise_scale",
    "server_decoding_weights",
]
