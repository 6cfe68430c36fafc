"""What a node remembers of its data set across fits: its privacy ledger.

A node's rules (its secure sums' record, its differential-privacy accountant)
otherwise live for one fit, and a coordinator may start as many fits as it
likes: a budget of ``dp-epsilon`` per fit is no budget over ten fits. With a
ledger (node config ``privacy-ledger``, a directory the node owns), a node
keeps, for each data set it holds (the SHA-256 of its rows), every
differentially private release it charged and every fit it took part in, in
a file of that directory:

* its accountant starts from every release ever charged on those rows, so
  ``dp-epsilon`` and ``dp-delta`` bound what all fits together release (the
  Gaussian releases compose exactly, whichever fit made them);
* with ``max-fits``, it refuses a fit beyond that many on those rows (rule
  ``max-fits``), at the handshake on a deployment, at its first step in a
  simulation.

A release is written to the ledger when it is charged, before its noise is
drawn and before the step returns: a crash or a refusal later in the fit
leaves it charged (the node errs on the side of its data). The file is
replaced atomically (:func:`os.replace`), never edited in place.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["NodeLedger", "data_fingerprint"]

_VERSION = 1


def data_fingerprint(data):
    """SHA-256 of a node's rows (dtype, shape and bytes): which data set a ledger is for."""
    array = np.ascontiguousarray(data)
    h = hashlib.sha256()
    h.update(array.dtype.str.encode() + repr(array.shape).encode())
    h.update(array.tobytes())
    return h.hexdigest()


class NodeLedger:
    """A node's ledger of one data set: its releases and its fits, kept in a file.

    Parameters
    ----------
    directory : str or path-like
        The node's ledger directory (created if missing).
    fingerprint : str
        The data set's :func:`data_fingerprint`.
    fit : str
        This fit's token (the session on a deployment, a fresh random token
        for a simulated federation): a fit is counted once, however many
        steps it runs.
    max_fits : int or None, default=None
        Fits this data set may take part in; ``None``: no limit.
    """

    def __init__(self, directory, fingerprint, fit, *, max_fits=None):
        self.directory = Path(directory)
        self.fingerprint = str(fingerprint)
        self.fit = str(fit)
        self.max_fits = None if max_fits is None else int(max_fits)

    @property
    def path(self):
        return self.directory / f"{self.fingerprint}.json"

    def _read(self):
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {"version": _VERSION, "fits": [], "releases": []}
        record = json.loads(text)
        if record.get("version") != _VERSION:
            raise ValueError(f"{self.path}: not a privacy ledger of version {_VERSION}")
        return record

    def _write(self, record):
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".ledger-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def enter_fit(self):
        """Count this fit on the data set; refuse it beyond ``max_fits`` (rule ``max-fits``)."""
        from ..secure._sum_guard import SumRefusal

        record = self._read()
        if self.fit in record["fits"]:
            return
        if self.max_fits is not None and len(record["fits"]) >= self.max_fits:
            raise SumRefusal(
                "max-fits",
                f"this node's rows took part in {len(record['fits'])} fits already; its "
                f"policy allows {self.max_fits} (max-fits, kept in {self.path})",
            )
        record["fits"].append(self.fit)
        self._write(record)

    @property
    def n_fits(self):
        """Fits counted on this data set so far."""
        return len(self._read()["fits"])

    def releases(self):
        """Every release charged on this data set, by any fit: ``(what, sensitivity, sigma,
        count)``."""
        return [tuple(r[1:]) for r in self._read()["releases"]]

    def record_releases(self, releases):
        """Add ``releases`` (``(what, sensitivity, sigma, count)`` each) to the ledger."""
        if not releases:
            return
        record = self._read()
        record["releases"].extend(
            [self.fit, str(w), float(s), float(g), int(c)] for w, s, g, c in releases
        )
        self._write(record)

    def __repr__(self):
        return f"NodeLedger({str(self.path)!r}, fit={self.fit!r})"
