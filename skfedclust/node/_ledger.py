"""What a node remembers across fits: its privacy ledger.

A node's rules (its secure sums' record, its differential-privacy accountant)
otherwise live for one fit, and a coordinator may start as many fits as it
likes: a budget of ``dp-epsilon`` per fit is no budget over ten fits. With a
ledger (node config ``privacy-ledger``, a directory the node owns), a node
keeps every differentially private release it charged and every fit it took
part in, in one file per **node** of that directory:

* its accountant starts from every release ever charged by the node, so
  ``dp-epsilon`` and ``dp-delta`` bound what all its fits together release
  (the Gaussian releases compose exactly, whichever fit made them);
* ``max-fits`` (100 by default, :data:`~skfedclust.node.DEFAULT_MAX_FITS`)
  caps the fits the node takes part in (rule ``max-fits``), at the handshake
  on a deployment, at its first step in a simulation;
* its secure sums' rule ``one-sum-per-input``
  (:mod:`skfedclust.node._sum_guard`) holds across fits: for every sum it
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

**One budget per node, whatever its rows.** The ledger is keyed by the node:
on Flower the fingerprint of its identity key, else its name from its node
config (``client-name``, ``partition-id``); in a simulation the party's
identity (its rows' fingerprint unless the runtime names its nodes). A node's
budget covers every data set it holds, and every version of them: a row
changed, added or reordered opens no fresh budget and no fresh count of
fits. Each fit notes which data set it ran on (its source and the SHA-256 of
its rows, :func:`data_fingerprint`) as information only.

Participants are compared by **identity**, not by slot number: a
coordinator may hand out the slots in another order at every fit. On Flower
a slot's identity is the fingerprint of the identity key the node verified
in the roster; a slot the node cannot authenticate (no identity, or a node
that allows unauthenticated peers and checks no signature) gets an identity
of that fit alone, so any repeat over it is refused (the node fails closed).

**Nothing loses it.** Every read-modify-write of the file holds an exclusive
lock (:func:`fcntl.flock` on ``.lock`` in the directory, and a thread lock in
the process): two fits of one node at once, in threads or processes, are
serialised charge by charge, so none is lost, and a charge is checked
against the budget under the same lock that writes it. The file is replaced
atomically (:func:`os.replace`), never edited in place. Once a ledger was
written, its name is appended to the directory's ``.written`` index: a
ledger that is then missing, empty, ``null``, truncated, unparsable or of
another node is refused (rule ``ledger-damaged``, naming the file), never
started afresh. Only the operator resets it, explicitly: ``python -m
skfedclust.flower ledger reset`` (:func:`reset_ledger`, which records the
reset in the file), or by deleting the whole directory.

A release is written to the ledger when it is charged, before its noise is
drawn, and a sum when the node joins it, before its masked upload leaves the
node (its survivors before its unmasking does): a crash or a refusal later in
the fit leaves them on record (the node errs on the side of its data).

Version 3 of the file is keyed by node. Files of versions 1 and 2 were keyed
by the rows' fingerprint (``<sha256>.json``): a node's new ledger adopts the
ones its runtime names (on Flower, every such file in its directory, which
may hold other nodes' too: charging them all errs on the side of the data;
in a simulation, its rows' own) when it is first written, so an upgrade loses
no charge. They stay in place (another node of the directory adopts them
too) and the ledger lists them under ``adopted``.
Version 3 also keeps, per key, every set of clients the key was added over (a
repeat over a set that differs by ``min-sum-participants`` clients or more is
accepted); a version-2 entry (one set per key) is read as a list of one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

try:  # POSIX: the lock that holds across processes.
    import fcntl
except ImportError:  # pragma: no cover - Windows: threads of one process only
    fcntl = None

__all__ = ["NodeLedger", "data_fingerprint", "ledger_summaries", "reset_ledger"]

_VERSION = 3
#: Versions this module reads; an older file gets what it lacks, empty.
_READABLE = (1, 2, 3)
#: The directory's append-only list of the ledgers written once.
INDEX = ".written"
#: The directory's lock file.
LOCK = ".lock"
#: What an operator may reset.
RESETS = ("budget", "fits", "sums", "all")
#: The name of a ledger of version 1 or 2: the rows' SHA-256.
_LEGACY = re.compile(r"^[0-9a-f]{64}\.json$")


def data_fingerprint(data):
    """SHA-256 of a node's rows (dtype, shape and bytes): which version of a data set a fit ran
    on (information in the ledger, never its key)."""
    array = np.ascontiguousarray(data)
    h = hashlib.sha256()
    h.update(array.dtype.str.encode() + repr(array.shape).encode())
    h.update(array.tobytes())
    return h.hexdigest()


def ledger_name(node):
    """The file name of ``node``'s ledger (a hash: any identity or name is a safe name)."""
    return "node-" + hashlib.sha256(str(node).encode()).hexdigest()[:40] + ".json"


#: How :meth:`NodeLedger.identities` names a slot it cannot authenticate.
_UNKNOWN = "fit "


def _unknown(fit, slot):
    return f"{_UNKNOWN}{fit}, slot {slot}"


def _isolates(earlier, current, minimum, *, fits=None, fit=None):
    """Whether a sum over ``current`` (identities) gives clients away with the ``earlier`` sets.

    ``isolated_clients``, failing closed on
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


# --------------------------------------------------------------------------- #
# The lock: threads of this process, then other processes
# --------------------------------------------------------------------------- #
_GUARD = threading.Lock()
_THREAD_LOCKS = {}
#: ``lock path: [file descriptor, depth]`` of the locks this process holds.
_HELD = {}


def _forget_locks_in_child():
    """A forked child holds none of its parent's locks: its copies would look held by a
    thread it does not have (a deadlock at its first ledger write)."""
    global _GUARD
    _GUARD = threading.Lock()
    for fd, _ in _HELD.values():
        # The parent's flock stays the parent's: closing one copy releases nothing.
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()
    _THREAD_LOCKS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_locks_in_child)


@contextlib.contextmanager
def directory_lock(directory):
    """Hold the ledger directory's exclusive lock (reentrant within a thread).

    A thread lock excludes the other threads of this process (``flock``
    excludes open files, and every thread would open its own); ``flock`` on
    ``directory/.lock`` excludes other processes, and is released by the
    system if the process dies.
    """
    directory = Path(directory)
    path = str((directory / LOCK).absolute())
    with _GUARD:
        lock = _THREAD_LOCKS.setdefault(path, threading.RLock())
    with lock:
        held = _HELD.get(path)
        if held is None:
            directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                if fcntl is not None:
                    fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            held = _HELD[path] = [fd, 0]
        held[1] += 1
        try:
            yield
        finally:
            held[1] -= 1
            if held[1] == 0:
                del _HELD[path]
                if fcntl is not None:
                    fcntl.flock(held[0], fcntl.LOCK_UN)
                os.close(held[0])


def _written(directory):
    """The names of the ledgers of ``directory`` that were written once."""
    try:
        return set((Path(directory) / INDEX).read_text().split())
    except FileNotFoundError:
        return set()


def _note_written(directory, name):
    """Append ``name`` to the directory's index of written ledgers (before the first write)."""
    if name in _written(directory):
        return
    with open(Path(directory) / INDEX, "a") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())


def _write_atomically(path, record):
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".ledger-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _damaged(path, what):
    from ._refusal import NodeRefusal

    return NodeRefusal(
        "ledger-damaged",
        f"this node's privacy ledger {path} {what}. It was written before, so the node "
        "refuses rather than start a fresh budget; restore the file, or reset it explicitly "
        f"('python -m skfedclust.flower ledger reset --dir {path.parent} --what all', or "
        "delete the whole directory) if its fits may be forgotten",
    )


def _fresh(node):
    return {"version": _VERSION, "node": node}


def _complete(record):
    """``record`` with the fields an older version lacks, empty; ``None`` if one is malformed."""
    record["version"] = _VERSION
    fields = {
        "fits": list,
        "releases": list,
        # Client sets (participants, survivors) are stored once each and
        # referred to by position: a fit joins hundreds of sums over one set.
        "client_sets": list,
        "sums": dict,
        "data_sets": dict,
        "resets": list,
    }
    for field, kind in fields.items():
        value = record.setdefault(field, kind())
        if not isinstance(value, kind):
            return None
    return record


def _load(path, node, written):
    """The ledger at ``path`` of ``node`` (``None``: any node); refuse a damaged one.

    ``written``: the ledger was written once (its file must exist).
    """
    try:
        text = path.read_text()
    except FileNotFoundError:
        if written:
            raise _damaged(path, "is missing") from None
        return _complete(_fresh(node))
    try:
        record = json.loads(text)
    except ValueError:
        what = "is empty" if not text.strip() else "is truncated or not JSON"
        raise _damaged(path, what) from None
    if not isinstance(record, dict) or not record:
        raise _damaged(path, f"holds {text.strip()[:20]!r}, not a ledger")
    if record.get("version") not in _READABLE:
        raise ValueError(
            f"{path}: not a privacy ledger of versions {list(_READABLE)} (this node "
            f"writes version {_VERSION}); move it aside only if its fits may be forgotten"
        )
    if record.get("node") is None:
        # Versions 1 and 2, or reset without a name: the file is the node's by its name.
        record["node"] = node
    elif node is not None and record["node"] != node:
        raise _damaged(path, f"is the ledger of {record['node']!r}, not of {node!r}")
    if _complete(record) is None:
        raise _damaged(path, "lacks a field or holds one of the wrong kind")
    return record


class NodeLedger:
    """A node's ledger: its releases, its fits and its sums, kept in a file.

    Parameters
    ----------
    directory : str or path-like
        The node's ledger directory (created if missing).
    node : str
        The node's identity (its identity key's fingerprint, else its name):
        the key of its ledger, one budget per node whatever its rows.
    fit : str
        This fit's token (the session on a deployment, a fresh random token
        for a simulated federation): a fit is counted once, however many
        steps it runs.
    max_fits : int or None, default=None
        Fits this node may take part in; ``None``: no limit (a node's policy
        passes its finite default).
    data_set : dict or None, default=None
        What the fit runs on (``source``, ``rows`` fingerprint, ``n_rows``):
        recorded with the fit as information only.
    written : bool, default=False
        The ledger was written earlier in this fit (a deployed node rebuilds
        its ledger at every step): a missing file is then damage.
    adopt : sequence of str, default=()
        Names of ledgers of versions 1 and 2 in ``directory`` (keyed by rows)
        that this node's new ledger takes over when first written.
    """

    def __init__(
        self, directory, node, fit, *, max_fits=None, data_set=None, written=False, adopt=()
    ):
        self.directory = Path(directory)
        self.node = str(node)
        self.fit = str(fit)
        self.max_fits = None if max_fits is None else int(max_fits)
        self.data_set = data_set
        self.adopt = tuple(adopt)
        # Once the file was seen, its absence is damage, even if the whole
        # directory (index included) goes mid-fit.
        self._seen = bool(written)

    @property
    def path(self):
        return self.directory / ledger_name(self.node)

    @property
    def fingerprint(self):
        """The ledger's key (kept for callers of the version keyed by rows)."""
        return self.node

    def locked(self):
        """Hold the ledger's lock across a read-modify-write (reentrant in a thread)."""
        return directory_lock(self.directory)

    def _read(self):
        with self.locked():
            written = self._seen or self.path.name in _written(self.directory)
            record = _load(self.path, self.node, written)
            if not written and self.adopt:
                self._adopt(record)
            self._seen = self._seen or written
            return record

    def _adopt(self, record):
        """Take over the fits, releases and sums of the legacy ledgers named in ``adopt``."""
        for name in self.adopt:
            old = self.directory / name
            if not old.exists():
                continue
            legacy = _load(old, None, True)
            fits = set(record["fits"])
            record["fits"].extend(f for f in legacy["fits"] if f not in fits)
            record["releases"].extend(legacy["releases"])
            offset = len(record["client_sets"])
            record["client_sets"].extend(legacy["client_sets"])
            for key, (fit, mine, ending) in legacy["sums"].items():
                record["sums"].setdefault(
                    key, [fit, mine + offset, None if ending is None else ending + offset]
                )
            record.setdefault("adopted", []).append(name)

    def _write(self, record):
        with self.locked():
            self.directory.mkdir(parents=True, exist_ok=True)
            # The index first: a crash between the two leaves a ledger on
            # record and missing (refused), never one written and unlisted.
            _note_written(self.directory, self.path.name)
            _write_atomically(self.path, record)
            self._seen = True

    def enter_fit(self):
        """Count this fit; refuse it beyond ``max_fits`` (rule ``max-fits``)."""
        from ._sum_guard import SumRefusal

        with self.locked():
            record = self._read()
            if self.fit in record["fits"]:
                return
            if self.max_fits is not None and len(record["fits"]) >= self.max_fits:
                raise SumRefusal(
                    "max-fits",
                    f"this node took part in {len(record['fits'])} fits already; its policy "
                    f"allows {self.max_fits} (max-fits, kept in {self.path})",
                )
            record["fits"].append(self.fit)
            if self.data_set is not None:
                record["data_sets"][self.fit] = dict(self.data_set)
            self._write(record)

    @property
    def n_fits(self):
        """Fits this node took part in so far."""
        return len(self._read()["fits"])

    def releases(self):
        """Every release charged by this node, by any fit: ``(what, sensitivity, sigma,
        count)``."""
        return [tuple(r[1:]) for r in self._read()["releases"]]

    def record_releases(self, releases):
        """Add ``releases`` (``(what, sensitivity, sigma, count)`` each) to the ledger.

        A caller that checks a budget first holds :meth:`locked` across the
        check and this call, so that no other fit charges in between.
        """
        if not releases:
            return
        with self.locked():
            record = self._read()
            record["releases"].extend(
                [self.fit, str(w), float(s), float(g), int(c)] for w, s, g, c in releases
            )
            self._write(record)

    def status(self, epsilon=None, delta=1e-5):
        """What the node spent and has left: fits and, with a budget, epsilon (at ``delta``).

        Returns
        -------
        status : dict
            ``fits_used``, ``fits_left`` (``None``: no limit), ``epsilon_spent``
            and ``epsilon_left`` (``None`` without a budget).
        """
        from ._accounting import PrivacyAccountant, Release

        record = self._read()
        used = len(record["fits"])
        accountant = PrivacyAccountant(epsilon, delta)
        accountant.releases = [Release(*r[1:]) for r in record["releases"]]
        spent = float(accountant.spent()[0]) if accountant.releases else 0.0
        return {
            "fits_used": used,
            "fits_left": None if self.max_fits is None else max(self.max_fits - used, 0),
            "epsilon_spent": spent,
            "epsilon_left": None if epsilon is None else max(float(epsilon) - spent, 0.0),
        }

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
        skfedclust.node.SumRefusal
            Rule ``one-sum-per-input``: with the sums of ``keys`` on record
            (of any fit), this one would make a group of between 1 and
            ``minimum - 1`` clients the server could isolate
            (``isolated_clients``).
        """
        with self.locked():
            record = self._read()
            sums, sets = record["sums"], record["client_sets"]
            mine = _client_set(sets, participants)
            changed = False
            for key in map(bytes.hex, keys):
                entries = _entries(sums.get(key))
                # Every fit's sums together: a sum of this fit may open, with
                # earlier fits' sums, a group of clients that neither did alone.
                earlier = [sets[e[1]] for e in entries]
                if _isolates(
                    earlier, sets[mine], minimum, fits=[e[0] for e in entries], fit=self.fit
                ):
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
        skfedclust.node.SumRefusal
            Rule ``one-sum-per-input``: with the survivors of the sums of
            ``keys`` on record, these would make a group of between 1 and
            ``minimum - 1`` clients the server could isolate.
        """
        with self.locked():
            record = self._read()
            sets, sums = record["client_sets"], record["sums"]
            ending = _client_set(sets, survivors)
            joined = None if participants is None else _client_set(sets, participants)
            changed = False
            for key in map(bytes.hex, keys):
                entries = _entries(sums.get(key))
                done = [e for e in entries if e[2] is not None]
                earlier = [sets[e[2]] for e in done]
                if _isolates(
                    earlier, sets[ending], minimum, fits=[e[0] for e in done], fit=self.fit
                ):
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
        return f"NodeLedger({str(self.path)!r}, node={self.node!r}, fit={self.fit!r})"


# --------------------------------------------------------------------------- #
# The operator's view: what the ledgers of a directory hold, and an explicit reset
# --------------------------------------------------------------------------- #
def _names(directory, node=None):
    directory = Path(directory)
    if node is not None:
        return [ledger_name(node)]
    found = {p.name for p in directory.glob("node-*.json")}
    return sorted(found | {n for n in _written(directory) if n.startswith("node-")})


def ledger_summaries(directory):
    """One line per ledger of ``directory``: its node, fits, releases, sums, or its damage."""
    lines = []
    if not Path(directory).is_dir():
        # Looking creates nothing.
        return lines
    with directory_lock(directory):
        for name in _names(directory):
            path = Path(directory) / name
            try:
                record = _load(path, None, name in _written(directory))
            except (PermissionError, ValueError) as exc:
                lines.append(f"{name}: {exc}")
                continue
            lines.append(
                f"{name}: node {record['node']}, {len(record['fits'])} fits, "
                f"{len(record['releases'])} releases, {len(record['sums'])} sums, "
                f"{len(record['resets'])} resets"
            )
    return lines


def reset_ledger(directory, what, *, node=None):
    """Reset the ledgers of ``directory`` (or ``node``'s): the operator's explicit act.

    Parameters
    ----------
    directory : str or path-like
        The node's ledger directory.
    what : {"budget", "fits", "sums", "all"}
        ``budget`` forgets the DP releases, ``fits`` the count of fits,
        ``sums`` the record of secure sums, ``all`` everything (a damaged or
        missing ledger can only be reset ``all``).
    node : str, default=None
        The node whose ledger to reset; ``None``: every ledger of the directory.

    Returns
    -------
    names : list of str
        The files reset. Each keeps a record of its resets (time and what).
    """
    if what not in RESETS:
        raise ValueError(f"what={what!r}: one of {', '.join(RESETS)}")
    directory = Path(directory)
    reset = []
    with directory_lock(directory):
        for name in _names(directory, node):
            path = directory / name
            try:
                record = _load(path, node, name in _written(directory))
            except PermissionError:
                if what != "all":
                    raise
                record = _complete(_fresh(node))
            if what in ("budget", "all"):
                record["releases"] = []
            if what in ("fits", "all"):
                record["fits"], record["data_sets"] = [], {}
            if what in ("sums", "all"):
                record["sums"], record["client_sets"] = {}, []
            record["resets"].append([time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), what])
            _note_written(directory, name)
            _write_atomically(path, record)
            reset.append(name)
    return reset


def legacy_ledgers(directory, fingerprint=None):
    """The ledgers of versions 1 and 2 in ``directory`` (``fingerprint``'s only, if given)."""
    directory = Path(directory)
    if fingerprint is not None:
        name = f"{fingerprint}.json"
        return [name] if (directory / name).exists() else []
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if _LEGACY.match(p.name))
