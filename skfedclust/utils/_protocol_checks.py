"""Reusable checks of a protocol run, for the tests of any estimator.

>>> from sklearn.datasets import make_blobs
>>> from skfedclust import KFed
>>> from skfedclust.utils.protocol_checks import check_protocol
>>> X, _ = make_blobs(90, centers=3, random_state=0)
>>> clients = [X[:30], X[30:60], X[60:]]
>>> # k-FED: one round; each client uploads k x d float64 centers and one int64.
>>> runtime = check_protocol(
...     KFed(3, random_state=0), clients, rounds=1, bytes_up=3 * (3 * 2 * 8 + 8)
... )
>>> runtime.ledger.report()["bytes_down"]  # the global centers, down to each client
144
"""

from __future__ import annotations

import contextlib

import numpy as np

from ..federation import InProcessRuntime, Received, use_runtime
from ..node._policy import _arrays

__all__ = ["RecordingRuntime", "check_protocol", "recording_runtime", "remove_self_masks"]


class RecordingRuntime(InProcessRuntime):
    """An in-process runtime that keeps every server step's inputs for inspection."""

    instances: list = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.server_inputs = []
        self.received = []
        RecordingRuntime.instances.append(self)

    def run(self, step, **kwargs):
        received = super().run(step, **kwargs)
        self.received.append(received)
        return received

    def server(self, step, *received, **public):
        self.server_inputs.append((step.__name__, received, public))
        return super().server(step, *received, **public)


@contextlib.contextmanager
def recording_runtime():
    """Run estimators on a :class:`RecordingRuntime`; yield the list of runtimes used."""
    RecordingRuntime.instances = []
    with use_runtime(RecordingRuntime):
        yield RecordingRuntime.instances


def remove_self_masks(uploads, reveals):
    """What a curious server makes of one secure sum: every upload without its self mask.

    ``uploads`` and ``reveals`` are the two inputs of the sum's unmasking
    server step (see :class:`RecordingRuntime`'s ``server_inputs``). Every
    survivor's self-mask seed is rebuilt from the Shamir shares its
    neighbours revealed and its mask taken off its upload; what is left still
    carries the pairwise masks, which cancel only in the total. Returns
    ``{client: uint64 array}``.
    """
    from ..secure import shamir_combine
    from ..secure._secure_sum import _self_mask

    opened = {}
    for c in uploads:
        shares = {
            int(x): (int(hi) << 64) | int(lo)
            for b_shares, *_ in reveals.values()
            for owner, x, hi, lo in np.asarray(b_shares).tolist()
            if owner == c
        }
        masked = np.asarray(uploads[c][0], dtype=np.uint64)
        opened[c] = masked - _self_mask(shamir_combine(shares), masked.size)
    return opened


def _sent_arrays(runtime):
    for received in runtime.received:
        for payload in received.values():
            yield from _arrays(payload)


def check_protocol(
    estimator,
    X,
    y=None,
    *,
    rounds=None,
    bytes_up=None,
    bytes_down=None,
    bytes_peer=None,
    private_keys=("labels",),
    **fit_params,
):
    """Fit ``estimator`` and check the protocol run against its documented behaviour.

    Checks that

    * every server step received only :class:`~skfedclust.federation.Received` messages of the run
      (the runtime refuses anything else) and that no public constant passed
      to a server step is a client's private array;
    * what each client kept or declared as output under ``private_keys`` (its
      labels by default) never appears in any message it sent;
    * ``communication_`` equals the ledger's report, and ``rounds``,
      ``bytes_up``, ``bytes_down`` and ``bytes_peer`` equal the given values
      (each may be a callable of the runtime, for a documented formula).

    Returns
    -------
    runtime : RecordingRuntime
        The runtime of the fit, for further checks.
    """
    with recording_runtime() as runtimes:
        estimator.fit(X, y, **fit_params)
    assert runtimes, f"{type(estimator).__name__} did not run on the protocol runtime"
    runtime = runtimes[-1]
    states = runtime.private_states() + runtime.party_outputs()
    private = [
        value
        for state in states
        for key in private_keys
        for value in _arrays(state.get(key))
        if value.size > 1
    ]
    for step, received, public in runtime.server_inputs:
        assert all(isinstance(r, Received) for r in received), step
        for name, value in public.items():
            for arr in _arrays(value):
                assert not any(arr is p for p in private), f"{step} got private {name}"
    for arr in _sent_arrays(runtime):
        for p in private:
            leaked = arr is p or (arr.shape == p.shape and np.array_equal(arr, p))
            assert not leaked, "a client's private state was sent"
    report = runtime.ledger.report()
    comm = estimator.communication_
    for key in ("rounds", "bytes_up", "bytes_down", "bytes_peer"):
        assert comm[key] == report[key], key
    for key, expected in (
        ("rounds", rounds),
        ("bytes_up", bytes_up),
        ("bytes_down", bytes_down),
        ("bytes_peer", bytes_peer),
    ):
        if expected is None:
            continue
        value = expected(runtime) if callable(expected) else expected
        assert comm[key] == value, f"communication_[{key!r}] = {comm[key]}, expected {value}"
    return runtime
