"""Prime-field arithmetic with exact modular matrix products on float64 BLAS.

Every secure computation of :mod:`skfedclust.secure` happens in the prime field
F_p with ``p < 2**31``, residues stored in ``[0, p)``. Scalar-times-matrix
products fit in int64 (``(p - 1)**2 < 2**62``); the expensive part, the
products of encoded matrices, must also be exact modulo ``p``. Integer matrix
products have no BLAS, so they run in float64, which is exact for integers
below ``2**53``:

* residues are first *centred* to ``(-p/2, p/2]``, which halves their bits;
* when ``p`` is small enough (the fast prime ``2**23 - 15``), one product of
  centred residues stays below ``2**53``;
* otherwise the right operand is cut into two signed limbs,
  ``b = hi * 2**s + lo``, and the left operand is stacked with its own
  multiple ``a * 2**s mod p``: ``[a * 2**s mod p, a] @ [hi, lo].T`` is
  congruent to ``a @ b.T`` and is **one** BLAS product of twice the inner
  width, every partial sum below ``2**53`` (the inner dimension is cut into
  chunks if it is too long for that);
* a few extra columns (scaled row norms against ones) can ride along in the
  same product, so that a whole block of squared distances mod p is one BLAS
  call and one reduction.

Reductions run in float64 too (``x - p * rint(x / p)``), on blocks small
enough to stay in cache. This module has no Python loop over samples.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

__all__ = [
    "DEFAULT_PRIME",
    "FAST_PRIME",
    "ModularProduct",
    "centred",
    "check_prime",
    "is_prime",
    "mod_inverse",
    "modular_matmul",
]

#: The default prime, ``2**30 - 35``. Products of encoded matrices take two
#: limbs, stacked into one float64 product of twice the inner width per block
#: (widths up to 511, i.e. d up to 1022 with two segments, in one product).
#: On unit-norm rows the overflow guard allows q = 13 (RMSE about 1e-4 on
#: L2-normalised digits, below the 2e-4 of OmniFC's Table 7).
DEFAULT_PRIME = 2**30 - 35

#: The fast prime, the largest below 2**23: one float64 product of the inner
#: width per block (widths up to 511), about half the work of the default.
#: The price is precision: the overflow guard allows about three bits less
#: (q = 9 or 10 on unit-norm rows, RMSE about 8e-4 on L2-normalised digits).
FAST_PRIME = 2**23 - 15

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
    r = np.array(residues, dtype=dtype)
    np.subtract(r, p, out=r, where=r > p // 2)
    return r


def reduction_bound(p):
    """Bound on ``|x|`` after :func:`reduce_inplace`: ``(p - 1) / 2 + 3``.

    The float quotient ``x * (1 / p)`` is within ``2.1 / p`` of ``x / p`` for
    ``|x| < 2**53``, so its rounding can only miss near a tie, where the
    result is still within 3 of ``p / 2``.
    """
    return (p - 1) // 2 + 3


def reduce_inplace(x, p, pinv, tmp):
    """``x <- x - p * rint(x / p)`` in place: a congruent value with ``|x| <= p/2 + 3``.

    ``x`` must hold integers with ``|x| <= 2**53 - p`` (so that ``p`` times the
    quotient is exact too); ``tmp`` is scratch of the same shape. See
    :func:`reduction_bound`; :func:`canonical_inplace` gives ``[0, p)``.
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


def _budget(p):
    """Largest partial sum of an exact product's terms.

    Below ``2**53`` by the two extra columns (values up to ``p / 2`` against
    ones) and the ``p`` :func:`reduce_inplace` needs.
    """
    return 2**53 - 2 * p


def mulmod_centred(a, factor, p):
    """``a * factor mod p`` for centred residues ``a`` (float64), centred again.

    In float64 when every product is exact (below ``2**52``), else in int64
    (``|a| < 2**30`` and ``|factor| < 2**31``).
    """
    a = np.asarray(a, dtype=np.float64)
    h = (p - 1) // 2
    if (h + 1) * abs(int(factor)) > 2**52:
        r = a.astype(np.int64) * int(factor)
        r %= p
        return centred(r, p)
    x = a * float(factor)
    reduce_inplace(x, p, 1.0 / p, np.empty_like(x))
    # |x| <= p/2 + 3 now: bring the few values outside (-p/2, p/2] inside
    np.subtract(x, p, out=x, where=x > h)
    np.add(x, p, out=x, where=x < -h)
    return x


def _fill_extra(chunk, extra):
    """Write the extra columns (arrays or scalars) into the last columns of ``chunk``."""
    if not extra:
        return
    start = chunk.shape[1] - len(extra)
    for k, column in enumerate(extra):
        chunk[:, start + k] = column


def _mulmod_into(a, factor, p, out):
    """``out <- a * factor mod p`` for centred residues ``a`` (float64).

    The result is congruent with ``|out| <= p/2 + 3`` (:func:`reduction_bound`):
    one float reduction, without the slower masked corrections to ``(-p/2,
    p/2]``; :meth:`ModularProduct.plan` budgets for the 3.
    """
    h = (p - 1) // 2
    factor = int(factor)
    if factor == 1:
        out[...] = a
        return out
    if (h + 3) * abs(factor) <= 2**52:
        np.multiply(a, float(factor), out=out)
        reduce_inplace(out, p, 1.0 / p, np.empty_like(out))
        return out
    out[...] = mulmod_centred(a, factor, p)
    return out


def centre_into(residues, p, out):
    """``out <- residues`` centred (float64, ``|out| <= (p - 1)/2``), by one float reduction.

    ``x - p * rint(x / p)`` for ``x`` in ``[0, p)``: ``rint`` is 0 below
    ``p/2`` and 1 above, exactly (``x / p`` is at least ``1 / (2p)`` away from
    ``1/2``), with plain passes instead of masked ones.
    """
    out[...] = residues
    return reduce_inplace(out, p, 1.0 / p, np.empty_like(out))


@dataclass(frozen=True)
class ModularProduct:
    """Exact plan for ``A @ B.T mod p`` with float64 BLAS.

    ``A`` and ``B`` hold centred residues of magnitude ``<= h = (p - 1) / 2``
    (the left operand, once multiplied by its factor, up to ``h + 3``).
    With ``n_limbs == 1`` the product of centred residues is exact as it is.
    With ``n_limbs == 2`` ``B`` is cut into two signed limbs of ``shift``
    bits, ``b = hi * 2**shift + lo``, and ``A`` is stacked with
    ``A * 2**shift mod p``, so that ``[A * 2**shift mod p, A] @ [hi, lo].T``
    (one BLAS product) is congruent to ``A @ B.T``. The inner dimension is cut
    into chunks of at most ``chunk`` columns so that every partial sum of a
    chunk's product (two extra columns included, see :meth:`left_operand`)
    is an integer of magnitude at most ``2**53 - p``, hence exact whatever
    order BLAS adds in, and reducible exactly.

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
        # left operands are reduced without the final correction: up to h + 3
        left = reduction_bound(p)
        width = max(int(width), 1)
        budget = _budget(p)
        single = budget // (left * h)
        if single >= width:
            return cls(p, 1, 0, width)
        # the limb split that minimises the largest column term h * (|hi| + |lo|)
        shift = min(range(1, h.bit_length() + 1), key=lambda s: (h >> s) + 1 + 2 ** (s - 1))
        chunk = budget // (left * ((h >> shift) + 1 + 2 ** (shift - 1)))
        if chunk < 1:
            raise ValueError(f"prime {p} is too large for exact float64 products")
        return cls(p, 2, shift, min(chunk, width))

    def chunks(self, width):
        """Column slices of the inner dimension, each exact in one product."""
        return [slice(a, min(a + self.chunk, width)) for a in range(0, width, self.chunk)]

    # ------------------------------------------------------------ operands
    def left_operand(self, a, *, factor=1, extra=None):
        """The left operand of :meth:`product`, one float64 array per chunk.

        Parameters
        ----------
        a : ndarray of shape (n, w)
            Centred residues.
        factor : int, default=1
            The product is ``(factor * a) @ b.T`` (e.g. ``-2`` for distances);
            taken mod p, so the operand does not grow.
        extra : list of ndarray of shape (n,), default=None
            Columns appended to the first chunk, against the right operand's
            ``extra``. Each pair of extra columns may contribute at most
            ``p / 2`` per row (e.g. values up to ``p / 2`` against ones).
        """
        a = np.asarray(a, np.float64)
        out = []
        for i, cols in enumerate(self.chunks(a.shape[1])):
            width = cols.stop - cols.start
            n_extra = len(extra) if i == 0 and extra else 0
            chunk = np.empty((a.shape[0], self.n_limbs * width + n_extra))
            plain = chunk[:, (self.n_limbs - 1) * width : self.n_limbs * width]
            _mulmod_into(a[:, cols], factor, self.p, plain)
            if self.n_limbs == 2:
                _mulmod_into(plain, 2**self.shift, self.p, chunk[:, :width])
            _fill_extra(chunk, extra if n_extra else None)
            out.append(chunk)
        return out

    def right_operand(self, b, *, extra=None):
        """The right operand of :meth:`product`, one float64 array per chunk.

        ``b`` holds centred residues of shape ``(n, w)``, cut into limbs when
        ``n_limbs == 2``; ``extra`` as in :meth:`left_operand`.
        """
        b = np.asarray(b, np.float64)
        out = []
        for i, cols in enumerate(self.chunks(b.shape[1])):
            width = cols.stop - cols.start
            n_extra = len(extra) if i == 0 and extra else 0
            chunk = np.empty((b.shape[0], self.n_limbs * width + n_extra))
            part = b[:, cols]
            if self.n_limbs == 2:
                # Scaling by a power of two and rounding are exact on these
                # integers: |hi| <= (h >> shift) + 1, |lo| <= 2**(shift - 1).
                hi, lo = chunk[:, :width], chunk[:, width : 2 * width]
                np.multiply(part, 2.0**-self.shift, out=hi)
                np.rint(hi, out=hi)
                np.multiply(hi, 2.0**self.shift, out=lo)
                np.subtract(part, lo, out=lo)
            else:
                chunk[:, :width] = part
            _fill_extra(chunk, extra if n_extra else None)
            out.append(chunk)
        return out

    def left_operand_from_residues(self, z, *, factor=1, extra=None):
        """:meth:`left_operand` of ``centred(z)``, in one compiled pass per chunk.

        ``z`` holds residues in ``[0, p)`` (e.g. uint32 shares). Bit-identical
        to ``left_operand(centre_into(z, ...), factor=factor, extra=extra)``:
        the same float64 operations, element by element, without the
        intermediate arrays. Falls back to that when a product of the
        multiplications by ``factor`` or ``2**shift`` would not be exact.
        """
        h = (self.p - 1) // 2
        factor = int(factor)
        shift_factor = 2**self.shift if self.n_limbs == 2 else 0
        if (h + 3) * max(abs(factor), shift_factor) > 2**52:
            return self.left_operand(
                centre_into(z, self.p, np.empty(z.shape)), factor=factor, extra=extra
            )
        from ._kernels import left_chunk

        out = []
        for i, cols in enumerate(self.chunks(z.shape[1])):
            width = cols.stop - cols.start
            n_extra = len(extra) if i == 0 and extra else 0
            chunk = np.empty((z.shape[0], self.n_limbs * width + n_extra))
            plain = (self.n_limbs - 1) * width
            left_chunk(
                z[:, cols], float(self.p), float(factor), float(shift_factor), chunk, plain, 0
            )
            _fill_extra(chunk, extra if n_extra else None)
            out.append(chunk)
        return out

    def right_operand_from_residues(self, z, *, extra=None):
        """:meth:`right_operand` of ``centred(z)``, in one compiled pass per chunk.

        Bit-identical to ``right_operand(centre_into(z, ...), extra=extra)``.
        """
        from ._kernels import right_chunk

        out = []
        for i, cols in enumerate(self.chunks(z.shape[1])):
            width = cols.stop - cols.start
            n_extra = len(extra) if i == 0 and extra else 0
            chunk = np.empty((z.shape[0], self.n_limbs * width + n_extra))
            shift = self.shift if self.n_limbs == 2 else 0
            right_chunk(z[:, cols], float(self.p), shift, chunk, 0, width)
            _fill_extra(chunk, extra if n_extra else None)
            out.append(chunk)
        return out

    # ------------------------------------------------------------ products
    def product(self, left, right, out, tmp, tmp2, *, reduce=True):
        """``out <- left @ right.T`` reduced: congruent integers with ``|out| <= p/2 + 3``.

        ``left`` and ``right`` are operands (lists of chunks, rows already
        selected) from :meth:`left_operand` and :meth:`right_operand`;
        ``out``, ``tmp`` and ``tmp2`` are ``(r, c)`` float64 arrays owned by
        the caller (reused across blocks so that nothing is allocated in the
        hot loop). ``reduce=False`` leaves out the last reduction: ``out``
        then holds exact congruent integers with ``|out| <= 2**53 - p``, for a
        caller that reduces them in a pass of its own (the same
        :func:`reduce_inplace` operations give the same residues).
        """
        p, pinv = self.p, 1.0 / self.p
        np.matmul(left[0], right[0].T, out=out)
        if len(left) == 1:
            return reduce_inplace(out, p, pinv, tmp) if reduce else out
        reduce_inplace(out, p, pinv, tmp)
        # each reduced chunk adds at most p/2 + 3 < 2**31: millions of chunks
        # fit below 2**53 before the sum needs a reduction
        for a, b in zip(left[1:], right[1:]):
            np.matmul(a, b.T, out=tmp2)
            out += reduce_inplace(tmp2, p, pinv, tmp)
        return reduce_inplace(out, p, pinv, tmp) if reduce else out


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
    left = plan.left_operand(centred(a, p))
    right = plan.right_operand(centred(b, p))
    plan.product(left, right, out, tmp, np.empty_like(out))
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
