"""Secure primitives: prime-field arithmetic and Lagrange coded computing.

:func:`lcc_squared_distances` computes the exact global squared-distance
matrix of horizontally partitioned data from Lagrange-coded shares (the
protocol of OmniFC); the helpers expose the public parameters (encoding matrix,
decoding weights, overflow guard) and the exact modular matrix product it is
built on.
"""

from ._field import DEFAULT_PRIME, is_prime, mod_inverse, modular_matmul
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

__all__ = [
    "DEFAULT_PRIME",
    "decoding_threshold",
    "encoding_matrix",
    "evaluation_points",
    "is_prime",
    "lagrange_matrix",
    "lcc_encode",
    "lcc_squared_distances",
    "max_safe_precision",
    "mod_inverse",
    "modular_matmul",
    "quantize",
    "server_decoding_weights",
]
