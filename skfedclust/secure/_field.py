"""Prime-field arithmetic with exact modular matrix products on float64 BLAS.

Every secure computation of :mod:`skfedclust.secure` happens in the prime field
F_p with ``p < 2**31``, residues stored in ``[0, p)``. Scalar-times-matrix
products fit in int64 (``(p - 1)**2 < 2**62``); the expensive part, the
products of encoded matrices, must also be exact modulo ``p``. Integer matrix
products have no BLAS, so they run in float64, which is exact for integers
below ``2**53``:

* residues are first *centred* to ``(-p/2, p/2]``, which halves their bits;
* the right operand is cut into two signed limbs, ``b = hi * 2**s + lo``, so
  that ``a @ hi.T`` and ``a @ lo.T`` stay below ``2**53`` (the inner dimension
  is cut into chunks if it is too long for that);
* when ``p`` is small enough a single product is exact and no limb is needed.

Reductions run in float64 too (``x - p * rint(x / p)``), on blocks small
enough to stay in cache. This module has no Python loop over samples.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DEFAULT_PRIME",
    "ModularProduct",
    "centred",
    "check_prime",
    "is_prime",
    "mod_inverse",
    "modular_matmul",
]

#: Largest prime below 2**23. Products of encoded matrices of width up to 512
#: (d up to 1024 with two segments) are then exact in ONE float64 product, which
#: halves the dominant cost of the protocol compared with a 2**30-size prime
#: (two limb products). The price is precision: on unit-norm rows with d = 784
#: the overflow guard allows q = 9 instead of 13. Pass a larger prime (up to
#: 2**31 - 1) for more bits; see the user guide for measured figures.
DEFAULT_PRIME = 2**23 - 15

#: float64 represents every integer of magnitude up to this bound exactly.
_EXACT = 2.0**53
_MAX_PRIME = 2**31


def is_prime(n):
    """Deterministic Miller-Rabin primality test, exact for ``n < 3.3e24``."""
    n = int(n)
    if n < 2:
        return False
    bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    for b in bases:
        if n % b == 0:
            return n == b
    d, s = n - 1, 0
    while d % 2 == 0:
        d //= 2
        s += 1
    for a in bases:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(s - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def check_prime(prime, *, min_value=3):
    """Validate the field modulus; return it as a Python int."""
    if isinstance(prime, bool) or not isinstance(prime, numbers.Integral):
        raise TypeError(f"prime must be an int, got {type(prime).__name__}")
    prime = int(prime)
    if not min_value <= prime < _MAX_PRIME:
        raise ValueError(
            f"prime must be in [{min_value}, 2**31) so that residues fit in 32 bits and "
            f"the evaluation points are distinct; got {prime}"
        )
    if not is_prime(prime):
        raise ValueError(f"prime={prime} is not a prime number")
    return prime


def mod_inverse(a, p):
    """Inverse of ``a`` modulo the prime ``p``."""
    a = int(a) % p
    if a == 0:
        raise ZeroDivisionError("0 has no inverse modulo p")
    return pow(a, p - 2, p)


def centred(residues, p, dtype=np.float64):
    """Map residues in ``[0, p)`` to the congruent values in ``(-p/2, p/2]``."""
    r = np.asarray(residues, dtype=np.int64)
    return np.where(r > p // 2, r - p, r).astype(dtype, copy=False)


def reduce_inplace(x, p, pinv, tmp):
    """``x <- x - p * rint(x / p)`` in place: a congruent value with ``|x| <= p``.

    ``x`` must hold integers below ``2**53`` in magnitude; ``tmp`` is scratch of
    the same shape. The float quotient can be off by one at exact ties, which is
    why the bound is ``p`` and not ``p / 2``; :func:`canonical_inplace` fixes it.
    """
    np.multiply(x, pinv, out=tmp)
    np.rint(tmp, out=tmp)
    tmp *= p
    x -= tmp
    return x


def canonical_inplace(x, p):
    """Bring values with ``|x| <= p`` to the canonical range ``[0, p)`` in place."""
    np.add(x, p, out=x, where=x < 0)
    np.subtract(x, p, out=x, where=x >= p)
    return x


@dataclass(frozen=True)
class ModularProduct:
    """Exact plan for ``A @ B.T mod p`` with float64 BLAS.

    ``A`` holds centred residues of magnitude ``<= h = (p - 1) / 2``. ``B`` is
    cut into ``n_limbs`` signed limbs of ``shift`` bits; the inner dimension is
    cut into chunks of at most ``chunk`` columns so that every partial sum of a
    chunk's product is an integer below ``2**53``, hence exact whatever order
    BLAS adds in.

    Attributes
    ----------
    p : int
        The prime.
    n_limbs : {1, 2}
        Limbs of the right operand.
    shift : int
        Bits of the low limb (0 when ``n_limbs == 1``).
    chunk : int
        Largest number of inner columns per exact product.
    """

    p: int
    n_limbs: int
    shift: int
    chunk: int

    @classmethod
    def plan(cls, p, width):
        """Fewest float64 products per block for residues of ``p`` and inner ``width``."""
        h = (p - 1) // 2
        width = max(int(width), 1)
        single = int(_EXACT // (h * h))
        if single >= width:
            return cls(p, 1, 0, width)
        bits = max(h.bit_length(), 1)
        shift = (bits + 2) // 2
        limb_max = max(2 ** (bits - shift), 2 ** (shift - 1))
        chunk = int(_EXACT // (h * limb_max))
        if chunk < 1:
            raise ValueError(f"prime {p} is too large for exact float64 products")
        return cls(p, 2, shift, min(chunk, width))

    # ------------------------------------------------------------ operands
    def right_limbs(self, b_centred):
        """Split centred residues into the float64 limbs used as right operands."""
        if self.n_limbs == 1:
            return (b_centred,)
        # Scaling by a power of two and floor are exact on these integers.
        hi = np.floor(np.ldexp(b_centred, -self.shift) + 0.5)
        lo = b_centred - np.ldexp(hi, self.shift)
        return hi, lo

    def chunks(self, width):
        """Column slices of the inner dimension, each exact in one product."""
        return [slice(a, min(a + self.chunk, width)) for a in range(0, width, self.chunk)]

    # ------------------------------------------------------------ products
    def product(self, a, limbs, out, tmp, tmp2):
        """``out <- a @ b.T`` as congruent integers with ``|out| < 2**47`` (b by its limbs).

        ``a`` is ``(r, w)`` centred residues, each limb ``(c, w)``; ``out``,
        ``tmp`` and ``tmp2`` are ``(r, c)`` float64 arrays owned by the caller
        (reused across blocks so that nothing is allocated in the hot loop). The
        result is left lazily reduced: the caller folds it into its own sums and
        reduces once.
        """
        chunks = self.chunks(a.shape[1])
        if len(chunks) == 1:
            return self._chunk_product(a, limbs, out, tmp, tmp2)
        total = np.zeros_like(out)
        pinv = 1.0 / self.p
        for cols in chunks:
            part = self._chunk_product(a[:, cols], [b[:, cols] for b in limbs], out, tmp, tmp2)
            total += reduce_inplace(part, self.p, pinv, tmp)
        out[...] = total
        return out

    def _chunk_product(self, a, limbs, out, tmp, tmp2):
        p = self.p
        pinv = 1.0 / p
        if self.n_limbs == 1:
            np.matmul(a, limbs[0].T, out=out)
            return reduce_inplace(out, p, pinv, tmp)
        hi, lo = limbs
        np.matmul(a, hi.T, out=out)
        reduce_inplace(out, p, pinv, tmp)
        out *= 2.0**self.shift
        np.matmul(a, lo.T, out=tmp2)
        reduce_inplace(tmp2, p, pinv, tmp)
        out += tmp2
        return out


def modular_matmul(a, b, p):
    """Exact ``a @ b.T mod p`` for residue matrices ``a`` (n, w) and ``b`` (k, w).

    Parameters
    ----------
    a : array-like of int of shape (n, w)
        Residues in ``[0, p)``.
    b : array-like of int of shape (k, w)
        Residues in ``[0, p)``.
    p : int
        A prime below ``2**31``.

    Returns
    -------
    c : ndarray of int64 of shape (n, k)
        ``(a @ b.T) mod p`` in ``[0, p)``, computed exactly with float64 BLAS.

    Examples
    --------
    >>> import numpy as np
    >>> from skfedclust.secure import modular_matmul
    >>> p = 2**31 - 1
    >>> a = np.array([[p - 1, 2]]); b = np.array([[p - 1, 3]])
    >>> int(modular_matmul(a, b, p)[0, 0]) == (1 + 6) % p
    True
    """
    p = check_prime(p)
    a = _check_residues(a, p, "a")
    b = _check_residues(b, p, "b")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"inner dimensions differ: {a.shape[1]} and {b.shape[1]}")
    plan = ModularProduct.plan(p, a.shape[1])
    out = np.empty((a.shape[0], b.shape[0]))
    tmp = np.empty_like(out)
    plan.product(centred(a, p), plan.right_limbs(centred(b, p)), out, tmp, np.empty_like(out))
    reduce_inplace(out, p, 1.0 / p, tmp)
    return canonical_inplace(out, p).astype(np.int64)


def _check_residues(x, p, name):
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of residues, got {x.ndim}-D")
    if x.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers (residues mod p), got dtype {x.dtype}")
    x = x.astype(np.int64)
    if x.size and (x.min() < 0 or x.max() >= p):
        raise ValueError(f"{name} must hold residues in [0, p)")
    return x


def ceil_log2(x):
    """Smallest ``k`` with ``2**k >= x``."""
    return max(0, math.ceil(math.log2(x))) if x > 0 else 0
