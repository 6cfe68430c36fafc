"""The ledger: byte sizes of payloads, rounds derived from exchanges."""

import numpy as np
import pytest

from skfedclust.federation import SERVER, Ledger, payload_nbytes


def test_payload_nbytes_counts_buffers():
    a = np.zeros((3, 4))
    assert payload_nbytes(a) == 96
    assert payload_nbytes((a, np.zeros(2, dtype=np.int32))) == 104
    assert payload_nbytes({"x": a, "k": 3}) == 104
    assert payload_nbytes(None) == 0
    assert payload_nbytes(np.broadcast_to(np.zeros(1, np.uint32), (10,))) == 40
    with pytest.raises(TypeError, match="object"):
        payload_nbytes(object())


def test_ledger_report_by_direction_round_and_client():
    ledger = Ledger(3)
    ledger.open_phase()
    ledger.record(np.ones((2, 2)), sender=0, receiver=SERVER)
    ledger.record(np.ones(4), sender=1, receiver=SERVER)
    ledger.record(np.ones(3), sender=0, receiver=2)
    ledger.open_phase()
    for c in range(3):
        ledger.record(np.ones(1), sender=SERVER, receiver=c)
    ledger.open_phase()
    ledger.record(np.ones(1), sender=2, receiver=SERVER)
    rep = ledger.report()
    assert rep["rounds"] == 2 and rep["setup_rounds"] == 0
    assert rep["bytes_up"] == 32 + 32 + 8
    assert rep["bytes_down"] == 24
    assert rep["bytes_peer"] == 24
    assert rep["bytes_total"] == 32 + 32 + 8 + 24 + 24
    assert rep["n_messages"] == 7
    np.testing.assert_array_equal(rep["per_client"]["bytes_up"], [32, 32, 8])
    np.testing.assert_array_equal(rep["per_client"]["bytes_down"], [8, 8, 8])
    np.testing.assert_array_equal(rep["per_client"]["bytes_peer_sent"], [24, 0, 0])
    np.testing.assert_array_equal(rep["per_client"]["bytes_peer_received"], [0, 0, 24])
    # Downloads belong to the round they answer; the second upload opens round 1.
    assert [m.round for m in ledger.messages] == [0, 0, 0, 0, 0, 0, 1]


def test_setup_phases_are_counted_apart():
    ledger = Ledger(2)
    ledger.open_phase(setup=True)
    ledger.record(np.ones(1), sender=0, receiver=1)
    ledger.open_phase()
    ledger.record(np.ones(1), sender=1, receiver=SERVER)
    rep = ledger.report()
    assert (rep["rounds"], rep["setup_rounds"]) == (1, 1)


def test_ledger_rejects_unknown_parties():
    ledger = Ledger(2)
    with pytest.raises(ValueError, match="unknown party"):
        ledger.record(np.ones(1), sender=5, receiver=SERVER)
    with pytest.raises(ValueError, match="unknown party"):
        ledger.record(np.ones(1), sender=True, receiver=SERVER)
    with pytest.raises(ValueError, match="itself"):
        ledger.record(np.ones(1), sender=SERVER, receiver=SERVER)


def test_evaluation_exchanges_are_counted_apart_from_the_methods_rounds():
    ledger = Ledger(2)
    ledger.open_phase()
    ledger.record(np.zeros(2), sender=0, receiver=SERVER)
    with ledger.evaluating():
        ledger.open_phase(setup=True)
        ledger.record(np.zeros(1), sender=0, receiver=1)
        ledger.open_phase()
        ledger.record(np.zeros(3), sender=1, receiver=SERVER)
    report = ledger.report()
    assert (report["rounds"], report["setup_rounds"], report["evaluation_rounds"]) == (1, 0, 2)
    assert report["bytes_up"] == 8 * 5 and report["bytes_peer"] == 8
