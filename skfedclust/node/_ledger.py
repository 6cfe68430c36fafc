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
  simulation;
* its secure sums' rule ``one-sum-per-input``
  (:mod:`skfedclust.secure._sum_guard`) holds across fits: for every sum it
  joins, the ledger keeps the keys the rule compares (the statistic, and the
  values it added, by what they reveal), who took part and, from its
  unmasking, who survived. A later fit that asks it to add a recorded key over
  participants, or to unmask one with survivors, that differ from an earlier
  fit's by fewer than ``min-sum-participants`` clients (one client left out,
  one new member) is refused: the sum over everyone in one fit and over
  everyone but one in the next would give away that one's vector as surely as
  two sums of one fit. The same participants and survivors (an honest re-fit
  over the same clients) tell nothing new and are accepted, and so do sets
  that differ by at least the minimum.

Participants are compared by **identity**, not by slot number: a
coordinator may hand out the slots in another order at every fit. On Flower
a slot's identity is the fingerprint of the identity key the node verified
in the roster; a slot the node cannot authenticate (no identity, or a node
that allows unauthenticated peers and checks no signature) gets an identity
of that fit alone, so any repeat over it is refused (the node fails closed).
In a simulation a slot's identity is the fingerprint of its rows.

A release is written to the ledger when it is charged, before its noise is
drawn, and a sum when the node joins it, before its masked upload leaves the
node (its survivors before its unmasking does): a crash or a refusal later in
the fit leaves them on record (the node errs on the side of its data). The
file is replaced atomically (:func:`os.replace`), never edited in place.

Version 2 of the file adds the sums' record; a file of version 1 is read (its
releases and fits hold) and rewritten as version 3 at its next change. Sums
joined before then are not on record: a node upgraded mid-way starts its
record empty rather than locking its owner out of the budget it keeps.
Version 3 keeps, per key, every set of clients the key was added over (a
repeat over a set that differs by ``min-sum-participants`` clients or more is
accepted); a version-2 entry (one set per key) is read as a list of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

__all__ = ["NodeLedger", "data_fingerprint"]

_VERSION = 3
#: Versions this module reads; an older file gets an empty record of sums.
_READABLE = (1, 2, 3)


def data_fingerprint(data):
    """SHA-256 of a node's rows (dtype, shape and bytes): which data set a ledger is for."""
    array = np.ascontiguousarray(data)
    h = hashlib.sha256()
    h.update(array.dtype.str.encode() + repr(array.shape).encode())
    h.update(array.tobytes())
    return h.hexdigest()


#: How :meth:`NodeLedger.identities` names a slot it cannot authenticate.
_UNKNOWN = "fit "


def _unknown(fit, slot):
    return f"{_UNKNOWN}{fit}, slot {slot}"


def _isolates(earlier, current, minimum, *, fits=None, fit=None):
    """Whether a sum over ``current`` (identities) gives clients away with the ``earlier`` sets.

    :func:`~skfedclust.node._sum_guard.isolated_clients`, failing closed on
    slots of unknown identity: any number of them may be the same node, so a
    set of another fit (``fits[k]`` for ``earlier[k]``, this fit ``fit``) that
    differs from ``current`` by one is refused however large the difference looks.
    """
    from ._sum_guard import isolated_clients

    current = set(current)
    for k, clients in enumerate(earlier):
        if fits is not None and fits[k] == fit:
            continue
        difference = set(clients) ^ current
        if any(str(i).startswith(_UNKNOWN) for i in difference):
            return True
    return bool(isolated_clients(earlier, current, minimum))


def _entries(entry):
    """A key's sums on record, ``[[fit, participants, survivors or None], ...]``.

    Version 2 kept one sum per key (``[fit, participants, survivors]``).
    """
    if not entry:
        return []
    if isinstance(entry[0], str):
        return [entry]
    return [list(e) for e in entry]


def _client_set(sets, identities):
    """The position of the client set ``identities`` in ``sets`` (appended if new)."""
    entry = sorted(str(i) for i in identities)
    try:
        return sets.index(entry)
    except ValueError:
        sets.append(entry)
        return len(sets) - 1


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
            text = "{}"
        record = json.loads(text) or {"version": _VERSION}
        if record.get("version") not in _READABLE:
            raise ValueError(
                f"{self.path}: not a privacy ledger of versions {list(_READABLE)} (this node "
                f"writes version {_VERSION}); move it aside only if its fits may be forgotten"
            )
        record["version"] = _VERSION
        for field in ("fits", "releases"):
            record.setdefault(field, [])
        # Client sets (participants, survivors) are stored once each and
        # referred to by position: a fit joins hundreds of sums over one set.
        record.setdefault("client_sets", [])
        record.setdefault("sums", {})
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
        from ._sum_guard import SumRefusal

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

    def identities(self, party, clients):
        """The identities of ``clients`` (slots) as ``party`` knows them.

        A slot without a known identity gets one of this fit alone: a repeat
        over it in another fit is refused (the node fails closed).
        """
        known = party.identities or ()
        return [
            known[c] if c < len(known) and known[c] is not None else _unknown(self.fit, c)
            for c in map(int, clients)
        ]

    def join_sum(self, keys, participants, *, minimum=3):
        """Record a sum over ``participants`` adding ``keys``; refuse a repeat of an earlier fit.

        Parameters
        ----------
        keys : sequence of bytes
            The keys rule ``one-sum-per-input`` compares (statistic, values).
        participants : sequence of str
            The participants' identities.
        minimum : int, default=3
            The node's ``min-sum-participants``.

        Raises
        ------
        SumRefusal
            Rule ``one-sum-per-input``: with the sums of ``keys`` on record
            (of any fit), this one would make a group of between 1 and
            ``minimum - 1`` clients the server could isolate
            (:func:`~skfedclust.node._sum_guard.isolated_clients`).
        """
        record = self._read()
        sums, sets = record["sums"], record["client_sets"]
        mine = _client_set(sets, participants)
        changed = False
        for key in map(bytes.hex, keys):
            entries = _entries(sums.get(key))
            # Every fit's sums together: a sum of this fit may open, with
            # earlier fits' sums, a group of clients that neither did alone.
            earlier = [sets[e[1]] for e in entries]
            if _isolates(earlier, sets[mine], minimum, fits=[e[0] for e in entries], fit=self.fit):
                self._refuse("added this statistic or these values over other clients")
            # A repeat of what is on record adds nothing: only a new entry costs a write.
            if not any(e[0] == self.fit and e[1] == mine for e in entries):
                sums[key] = [*entries, [self.fit, mine, None]]
                changed = True
        if changed:
            self._write(record)

    def unmask_sum(self, keys, survivors, *, participants=None, minimum=3):
        """Record the survivors of a sum adding ``keys``; refuse survivors that differ too
        little from an earlier fit's.

        ``participants`` (identities) names the sum this fit joined; ``None``
        takes this fit's entry of each key without survivors.

        Raises
        ------
        SumRefusal
            Rule ``one-sum-per-input``: with the survivors of the sums of
            ``keys`` on record, these would make a group of between 1 and
            ``minimum - 1`` clients the server could isolate.
        """
        record = self._read()
        sets, sums = record["client_sets"], record["sums"]
        ending = _client_set(sets, survivors)
        joined = None if participants is None else _client_set(sets, participants)
        changed = False
        for key in map(bytes.hex, keys):
            entries = _entries(sums.get(key))
            done = [e for e in entries if e[2] is not None]
            earlier = [sets[e[2]] for e in done]
            if _isolates(earlier, sets[ending], minimum, fits=[e[0] for e in done], fit=self.fit):
                self._refuse("unmasked this statistic or these values with other survivors")
            for entry in entries:
                # Survivors a fit never learned (it ended before this node
                # unmasked) are known from now on.
                if entry[2] is None and (joined is None or entry[1] == joined):
                    entry[2] = ending
                    changed = True
            if joined is not None and [self.fit, joined, ending] not in entries:
                entries.append([self.fit, joined, ending])
                changed = True
            if entries:
                sums[key] = entries
        if changed:
            self._write(record)

    def _refuse(self, what):
        from ._sum_guard import SumRefusal

        raise SumRefusal(
            "one-sum-per-input",
            f"an earlier fit on this node's rows {what} (kept in its privacy ledger "
            f"{self.path}); a second sum would give away the difference",
        )

    def __repr__(self):
        return f"NodeLedger({str(self.path)!r}, fit={self.fit!r})"
