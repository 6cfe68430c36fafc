"""Differential privacy that holds for every message a coordinator can send.

A node charges each noisy release with a sensitivity it computes from public
constants; the guarantee holds only if no server input can make one row move
the release further. For every charged client step this file feeds hostile
inputs (centers at 1e6, NaN, inf, duplicated centers, huge or zero scales) on
two neighbouring data sets (one row replaced) and checks that the release
before its noise moves by at most the sensitivity the node charged, or that
the node refuses. The noise is read off by a test hook: the step module's
``private_normal`` replaced by zeros (the step still charges its release).

Then the three attacks on DP nodes: (a) an inertia on centers at
``(t -/+ L) u`` that gave back a row, (b) integer payloads and bound
agreements answered outside the budget, (c) a noise share announced by the
coordinator.
"""

import contextlib
import math

import numpy as np
import pytest

from skfedclust import FederatedKMeans
from skfedclust.federation import Federation, InProcessRuntime, Party, use_runtime
from skfedclust.federation._runtime import Reply
from skfedclust.methods import _fedkmeans_steps, _fedsc_steps
from skfedclust.methods._fedkmeans_steps import (
    TAG_CENTERS,
    dp_inertia_exact,
    fedkmeans_dp_inertia,
    fedkmeans_dp_lloyd_statistics,
    fedkmeans_dp_moments,
    fedkmeans_nearest_distances,
)
from skfedclust.methods._fedsc_steps import fedsc_coefficients, fedsc_prepare, fedsc_round
from skfedclust.node._declarations import summary
from skfedclust.node._dp import MIN_SURVIVORS, NODE_ACCOUNTANT, inside_secure_sum
from skfedclust.node._policy import NodePolicy
from skfedclust.node._refusal import NodeRefusal
from skfedclust.secure import SecureAggregator, agree_bound
from skfedclust.secure._dp import coef_sensitivity, dictionary_sensitivity

LOWER, UPPER = np.array([-3.0, -2.0, -1.0]), np.array([5.0, 2.0, 4.0])
DIAGONAL = float(np.linalg.norm(UPPER - LOWER))
#: Rounding of float64 sums of rows of the box's scale.
RTOL = 1e-9


def _policy(**extra):
    return NodePolicy(dp_epsilon=1.0, privacy_ledger=False, **extra)


def _party(**extra):
    return Party(0, 0, 7, policy=_policy(**extra))


def refused(rule):
    return pytest.raises(NodeRefusal, match=f"refused by rule '{rule}'")


@pytest.fixture
def no_noise(monkeypatch):
    """The steps' noise replaced by zeros: what a release is before its noise."""

    def zeros(party, std, shape):
        assert np.isfinite(std) and std > 0  # the step still draws noise it charged
        return np.zeros((shape,) if isinstance(shape, int) else shape)

    monkeypatch.setattr(_fedkmeans_steps, "private_normal", zeros)
    monkeypatch.setattr(_fedsc_steps, "private_normal", zeros)


def _rows(seed=0, n=40):
    rng = np.random.default_rng(seed)
    return rng.uniform(LOWER - 1, UPPER + 1, size=(n, 3))


def _neighbours(data):
    """Data sets that differ from ``data`` in one replaced row: far outside the
    box, at a corner, at the center of the box, and a copy of another row."""
    replacements = [
        np.array([1e6, -1e6, 1e6]),
        UPPER.copy(),
        LOWER.copy(),
        (LOWER + UPPER) / 2,
        data[1].copy(),
        np.array([-1e300, 1e300, 0.0]),
    ]
    for row in replacements:
        for index in (0, len(data) - 1):
            other = data.copy()
            other[index] = row
            yield other


#: Centers a hostile coordinator sends (``nan`` ones are refused).
L = 1e6
U = np.array([1.0, 0.0, 0.0])
HOSTILE_CENTERS = {
    "far apart on a line (attack a)": np.array([(0.5 - L) * U, (0.5 + L) * U]),
    "at 1e6": np.full((3, 3), 1e6),
    "one at 1e6, one in the box": np.array([[1e6, 1e6, 1e6], [0.0, 0.0, 0.0]]),
    "infinite": np.array([[np.inf, -np.inf, np.inf], [0.0, 0.0, 0.0]]),
    "duplicated": np.array([[1.0, 0.0, 1.0]] * 4),
    "at 1e300": np.array([[1e300, -1e300, 1e300], [-1e300, 1e300, -1e300]]),
    "one center": np.array([[0.0, 0.0, 0.0]]),
    "in the box": np.array([[-2.0, -1.0, 0.0], [4.0, 1.0, 3.0], [0.0, 0.0, 0.0]]),
}


def _charged(reply):
    """The release the step charged last: its sensitivity."""
    return reply.keep[NODE_ACCOUNTANT].releases[-1].sensitivity


# --------------------------------------------------------------------------- #
# FederatedKMeans' charged steps
# --------------------------------------------------------------------------- #
def _lloyd(data, centers, lower=LOWER, upper=UPPER, sigma=None):
    diagonal = float(np.linalg.norm(upper - lower))
    sigma = 10 * diagonal if sigma is None else sigma
    return fedkmeans_dp_lloyd_statistics(
        data, {TAG_CENTERS: centers}, {}, _party(), lower=lower, upper=upper, sigma=sigma,
        noise_share=1,
    )  # fmt: skip


def _lloyd_release(reply, diagonal):
    # The counts hold noise 2 sigma / ||w||: scaled by ||w|| / 2, the pair
    # (sums, counts) is one release of sensitivity ||w|| at noise sigma.
    sums, counts = reply.send
    return np.concatenate([np.ravel(sums), np.ravel(counts) * diagonal / 2])


@pytest.mark.parametrize("centers", HOSTILE_CENTERS.values(), ids=HOSTILE_CENTERS)
def test_the_lloyd_release_moves_by_at_most_its_sensitivity_for_any_centers(no_noise, centers):
    data = _rows()
    reply = _lloyd(data, centers)
    assert _charged(reply) == pytest.approx(DIAGONAL)
    release = _lloyd_release(reply, DIAGONAL)
    assert np.all(np.isfinite(release))
    for other in _neighbours(data):
        moved = np.linalg.norm(_lloyd_release(_lloyd(other, centers), DIAGONAL) - release)
        assert moved <= DIAGONAL * (1 + RTOL)


@pytest.mark.parametrize("centers", HOSTILE_CENTERS.values(), ids=HOSTILE_CENTERS)
def test_the_inertia_moves_by_at_most_its_sensitivity_for_any_centers(no_noise, centers):
    data = _rows()

    def inertia(rows):
        reply = fedkmeans_dp_inertia(
            rows, {TAG_CENTERS: centers}, {}, _party(), lower=LOWER, upper=UPPER,
            sigma=10 * DIAGONAL**2, noise_share=1, output=False,
        )  # fmt: skip
        assert _charged(reply) == pytest.approx(DIAGONAL**2)
        return float(reply.send[0])

    release = inertia(data)
    assert np.isfinite(release)
    for other in _neighbours(data):
        assert abs(inertia(other) - release) <= DIAGONAL**2 * (1 + RTOL)


def test_the_moments_move_by_at_most_their_sensitivities(no_noise):
    data = _rows()
    squares_sensitivity = float(np.linalg.norm((UPPER - LOWER) ** 2)) / 4

    def moments(rows):
        reply = fedkmeans_dp_moments(
            rows, {}, {}, _party(), lower=LOWER, upper=UPPER, sigma_sums=20 * DIAGONAL,
            sigma_squares=20 * squares_sensitivity, noise_share=1,
        )  # fmt: skip
        charged = [r.sensitivity for r in reply.keep[NODE_ACCOUNTANT].releases]
        assert charged == pytest.approx([DIAGONAL, squares_sensitivity])
        return reply.send

    sums, squares = moments(data)
    for other in _neighbours(data):
        other_sums, other_squares = moments(other)
        assert np.linalg.norm(other_sums - sums) <= DIAGONAL * (1 + RTOL)
        assert np.linalg.norm(other_squares - squares) <= squares_sensitivity * (1 + RTOL)


@pytest.mark.parametrize(
    "lower, upper",
    [
        (np.full(3, -np.inf), np.full(3, np.inf)),
        (np.array([0.0, np.nan, 0.0]), np.ones(3)),
        (np.full(3, -1e300), np.full(3, 1e300)),  # the diagonal overflows
        (np.ones(3), np.ones(3)),  # no width
        (UPPER, LOWER),  # upside down
    ],
    ids=["infinite", "nan", "overflowing", "flat", "upside down"],
)
@pytest.mark.parametrize("step", ["lloyd", "inertia", "moments"])
def test_a_box_without_a_finite_sensitivity_is_refused(no_noise, lower, upper, step):
    data, centers = _rows(), HOSTILE_CENTERS["in the box"]
    common = dict(lower=lower, upper=upper, noise_share=1)
    with refused("dp-inputs"):
        if step == "lloyd":
            fedkmeans_dp_lloyd_statistics(
                data, {TAG_CENTERS: centers}, {}, _party(), sigma=1e3, **common
            )
        elif step == "inertia":
            fedkmeans_dp_inertia(
                data, {TAG_CENTERS: centers}, {}, _party(), sigma=1e3, output=False, **common
            )
        else:
            fedkmeans_dp_moments(
                data, {}, {}, _party(), sigma_sums=1e3, sigma_squares=1e3, **common
            )


def test_a_huge_box_is_charged_as_huge(no_noise):
    # A wider box is a larger sensitivity, which the node's budget pays for:
    # the same noise that pays for the fit's box is refused for it.
    wide_lower, wide_upper = np.full(3, -1e100), np.full(3, 1e100)
    with refused("dp-budget"):
        _lloyd(_rows(), HOSTILE_CENTERS["in the box"], wide_lower, wide_upper, sigma=10 * DIAGONAL)
    wide = float(np.linalg.norm(wide_upper - wide_lower))
    reply = _lloyd(_rows(), HOSTILE_CENTERS["at 1e6"], wide_lower, wide_upper, sigma=10 * wide)
    assert _charged(reply) == pytest.approx(wide)


@pytest.mark.parametrize("step", ["lloyd", "inertia"])
def test_nan_centers_are_refused(no_noise, step):
    centers = np.array([[np.nan, 0.0, 0.0], [1.0, 1.0, 1.0]])
    with refused("dp-inputs"):
        if step == "lloyd":
            _lloyd(_rows(), centers)
        else:
            fedkmeans_dp_inertia(
                _rows(), {TAG_CENTERS: centers}, {}, _party(), lower=LOWER, upper=UPPER,
                sigma=10 * DIAGONAL**2, noise_share=1, output=False,
            )  # fmt: skip


@pytest.mark.parametrize("sigma", [0.0, -1.0, math.nan, math.inf])
def test_a_release_without_finite_positive_noise_is_refused(no_noise, sigma):
    with refused("dp-noise"):
        _lloyd(_rows(), HOSTILE_CENTERS["in the box"], sigma=sigma)


# --------------------------------------------------------------------------- #
# Attack (a): an inertia on centers the server placed far apart
# --------------------------------------------------------------------------- #
def _clear_runtime(data, n_clients=3):
    """Simulated DP nodes that let a coordinator ask for a summand in the clear."""
    federation = Federation(data, np.array_split(np.arange(len(data)), n_clients))
    federation.spawn_seeds(np.random.RandomState(1))
    policy = NodePolicy(
        dp_epsilon=1.0, privacy_ledger=False, allow_clear_sums=True, min_rows_per_vector=None,
        refuse_raw_rows=False,
    )  # fmt: skip
    return InProcessRuntime(federation, private_entropy=[3], policy=policy)


def _hostile_inertia(data, length, t=0.5, direction=U):
    """The coordinator's inertia request of attack (a): centers at (t -/+ L) u."""
    runtime = _clear_runtime(data)
    centers = np.array([(t - length) * direction, (t + length) * direction])
    runtime.broadcast(centers, tag=TAG_CENTERS, clients=[0])
    received = runtime.run(
        fedkmeans_dp_inertia, tag="hostile inertia", clients=[0], lower=LOWER, upper=UPPER,
        sigma=10 * DIAGONAL**2, noise_share=1, output=False,
    )  # fmt: skip
    return float(received.list()[0][0])


def test_attack_a_the_inertia_no_longer_depends_on_centers_beyond_the_box(no_noise):
    data = _rows(n=30)
    # Before: each row moved the release by about 2 L ||u . x||; bisection on t
    # located a row. Now the centers are projected into the box first.
    releases = {length: _hostile_inertia(data, length) for length in (1e3, 1e6, 1e9)}
    assert len(set(releases.values())) == 1
    centers = np.clip(np.array([(0.5 - 1e6) * U, (0.5 + 1e6) * U]), LOWER, UPPER)
    expected = dp_inertia_exact(np.array_split(data, 3)[0], centers, LOWER, UPPER)[0]
    assert releases[1e6] == pytest.approx(expected, rel=1e-12)
    # The bisection's probe t moves both centers along u; projected, they sit
    # on the box's faces whatever t is: the probes tell nothing.
    probes = {_hostile_inertia(data, 1e6, t=t) for t in np.linspace(-3.0, 5.0, 9)}
    assert probes == {releases[1e6]}
    # A replaced row moves the release by at most the charged ||w||^2, not by ~2 L ||w||.
    for index in range(10):
        other = data.copy()
        other[index] = [1e6, 1e6, 1e6]
        assert abs(_hostile_inertia(other, 1e6) - releases[1e6]) <= DIAGONAL**2


# --------------------------------------------------------------------------- #
# FedSC's charged steps
# --------------------------------------------------------------------------- #
def _fedsc_rows(seed=0, n=25, d=3):
    return np.random.default_rng(seed).normal(size=(n, d))


def _fedsc_neighbours(data):
    for row in (np.full(3, 1e6), np.zeros(3), data[1], np.array([-1e3, 0.0, 5.0])):
        for index in (0, len(data) - 1):
            other = data.copy()
            other[index] = row
            yield other


@pytest.mark.parametrize("clip", [0.5, 8.0, 1e6])
def test_the_perturbed_rows_move_by_at_most_their_sensitivity(no_noise, clip):
    data = _fedsc_rows()

    def rows(x):
        reply = fedsc_prepare(
            x, {}, {}, _party(), data_noise=("calibrated", clip, 100 * clip), send_rows=False
        )
        assert _charged(reply) == pytest.approx(2 * clip)
        return reply.keep["rows"]

    release = rows(data)
    for other in _fedsc_neighbours(data):
        assert np.linalg.norm(rows(other) - release) <= 2 * clip * (1 + RTOL)


@pytest.mark.parametrize("clip", [0.0, -1.0, math.nan, math.inf, None])
def test_rows_perturbed_without_a_finite_clip_are_refused(no_noise, clip):
    with refused("dp-noise"):
        fedsc_prepare(
            _fedsc_rows(), {}, {}, _party(), data_noise=("calibrated", clip, 1.0), send_rows=False
        )


ATOMS = {
    "at 1e6": np.full((4, 3), 1e6),
    "duplicated": np.array([[0.1, 0.2, 0.3]] * 4),
    "near the rows": _fedsc_rows(seed=1, n=4),
    "one far, the rest duplicated": np.array([[1e6, 0, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]),
}


def _round(data, dictionary, bandwidth, reg=1e-2, learning_rate=0.1, coef_clip=None):
    sensitivity = dictionary_sensitivity(
        bandwidth=bandwidth, n_components=len(dictionary), learning_rate=learning_rate,
        lam=reg, coef_clip=coef_clip,
    )  # fmt: skip
    reply = fedsc_round(
        data, {"dictionary": dictionary}, {}, _party(), check_underflow=False,
        bandwidth=bandwidth, reg=reg, z_update="gradient", learning_rate=learning_rate,
        coef_clip=coef_clip, dictionary_noise=("calibrated", None, 10 * sensitivity),
        send_count=False, send_objective=False, send_coef=False, coef_noise=None,
    )  # fmt: skip
    assert _charged(reply) == pytest.approx(sensitivity)
    return reply.send["dictionary"], sensitivity


@pytest.mark.parametrize("bandwidth", [1e-3, 2.5, 1e6], ids=["tiny", "usual", "huge"])
@pytest.mark.parametrize("dictionary", ATOMS.values(), ids=ATOMS)
def test_the_dictionary_moves_by_at_most_its_sensitivity(no_noise, dictionary, bandwidth):
    data = _fedsc_rows()
    release, sensitivity = _round(data, dictionary, bandwidth)
    assert np.all(np.isfinite(release))
    for other in _fedsc_neighbours(data):
        moved = np.linalg.norm(_round(other, dictionary, bandwidth)[0] - release)
        assert moved <= sensitivity * (1 + 1e-6)


@pytest.mark.parametrize(
    "change",
    [
        dict(dictionary=np.array([[np.nan, 0, 0], [1, 1, 1]])),
        dict(dictionary=np.array([[np.inf, 0, 0], [1, 1, 1]])),
        dict(bandwidth=0.0),
        dict(bandwidth=math.inf),
        dict(bandwidth=math.nan),
        dict(z_update="preconditioned"),
        dict(learning_rate="auto"),
        dict(learning_rate=0.0),
        dict(check_underflow=True),
        dict(reg=0.0),
    ],
    ids=lambda c: "-".join(f"{k}={v!r}"[:30] for k, v in c.items()),
)
def test_factor_inputs_no_sensitivity_covers_are_refused(no_noise, change):
    public = dict(
        check_underflow=False, bandwidth=2.5, reg=1e-2, z_update="gradient", learning_rate=0.1,
        coef_clip=None, dictionary_noise=("calibrated", None, 10.0), send_count=False,
        send_objective=False, send_coef=False, coef_noise=None,
    )  # fmt: skip
    dictionary = change.pop("dictionary", ATOMS["near the rows"])
    with refused("dp-inputs"):
        fedsc_round(_fedsc_rows(), {"dictionary": dictionary}, {}, _party(), **{**public, **change})


@pytest.mark.parametrize("clip", [None, 0.5])
@pytest.mark.parametrize("dictionary", ATOMS.values(), ids=ATOMS)
def test_the_coefficients_move_by_at_most_their_sensitivity(no_noise, dictionary, clip):
    data, reg = _fedsc_rows(), 1e-3
    sensitivity = coef_sensitivity(lam=reg, n_components=len(dictionary), coef_clip=clip)

    def coefficients(x):
        reply = fedsc_coefficients(
            x, {"dictionary": dictionary}, {"bandwidth": 2.5}, _party(), reg=reg,
            coef_noise=("calibrated", clip, 10 * sensitivity),
        )  # fmt: skip
        assert _charged(reply) == pytest.approx(sensitivity)
        return reply.send["coef"]

    release = coefficients(data)
    for other in _fedsc_neighbours(data):
        assert np.linalg.norm(coefficients(other) - release) <= sensitivity * (1 + RTOL)


def test_coefficients_for_a_hostile_kept_bandwidth_are_refused(no_noise):
    with refused("dp-inputs"):
        fedsc_coefficients(
            _fedsc_rows(), {"dictionary": ATOMS["near the rows"]}, {"bandwidth": 0.0}, _party(),
            reg=1e-2, coef_noise=("calibrated", None, 100.0),
        )  # fmt: skip


# --------------------------------------------------------------------------- #
# Attack (b): values of any dtype outside the budget
# --------------------------------------------------------------------------- #
# Declared as what they are, per-client summaries: the DP node's own rule refuses them.
@summary
def row_count_histogram(data, inbox, state, party, *, edges):
    """A hostile step: how many of the node's rows fall in each bin of feature 0 (int64)."""
    counts, _ = np.histogram(data[:, 0], bins=np.asarray(edges))
    return Reply(send=counts.astype(np.int64))


@summary
def row_in_ball(data, inbox, state, party, *, center, radius):
    """A hostile step: whether a row lies in a ball (a bool, then a Python int)."""
    inside = bool(np.any(np.linalg.norm(data - np.asarray(center), axis=1) < radius))
    return Reply(send=(np.bool_(inside), int(inside)))


@pytest.mark.parametrize(
    "step, public",
    [
        (row_count_histogram, dict(edges=[-10.0, 0.0, 10.0])),
        (row_in_ball, dict(center=[0.0, 0.0, 0.0], radius=1.0)),
    ],
    ids=["int64 histogram", "bool and int"],
)
def test_attack_b_integer_payloads_leave_no_dp_node(step, public):
    data = _rows(n=30)
    with refused("dp-only"):
        _clear_runtime(data).run(step, tag="hostile counts", clients=[0], **public)
    # A node without a budget answers (its policy's other rules permitting).
    federation = Federation(data, np.array_split(np.arange(len(data)), 3))
    federation.spawn_seeds(np.random.RandomState(1))
    InProcessRuntime(federation).run(step, tag="counts", clients=[0], **public)


def _bound_runtime(policy):
    data = _rows(n=60)
    federation = Federation(data, np.array_split(np.arange(len(data)), 4))
    federation.spawn_seeds(np.random.RandomState(1))
    return InProcessRuntime(federation, private_entropy=[3], policy=policy)


def test_attack_b_bound_agreements_on_server_chosen_centers_are_refused_by_dp_nodes():
    # Nodes whose operator lets the coordinator choose centers (a default node
    # refuses the step itself, rule coordinator-centers): the budget still refuses.
    allowed = {"allow_coordinator_centers": "*"}
    for policy, answers in (
        (NodePolicy(privacy_ledger=False, **allowed), True),
        (_policy(**allowed), False),
    ):
        runtime = _bound_runtime(policy)
        aggregator = SecureAggregator(runtime, seed=0)
        aggregator.setup()
        centers = np.array([[1e3, 0.0, 0.0]])
        if answers:
            bound = agree_bound(
                aggregator, fedkmeans_nearest_distances, tag="hostile bound", centers=centers
            )
            assert bound >= 1e6 - 1e5  # the binary order of the largest squared distance
            continue
        with refused("dp-bounds"):
            agree_bound(
                aggregator, fedkmeans_nearest_distances, tag="hostile bound", centers=centers
            )


def test_dp_nodes_still_run_the_data_independent_steps_of_a_private_fit():
    # Secure-sum set-up, attestation, unmasking and the sampling commitments
    # are declared data-independent: a DP node sends them, and the honest
    # private fit (public box, no bound agreement) runs on DP nodes.
    rng = np.random.default_rng(0)
    clients = [rng.normal(size=(60, 3)) + 3 * (i % 2) for i in range(5)]
    policy = NodePolicy(
        dp_epsilon=1.0, privacy_ledger=False, min_rows_per_vector=None, refuse_raw_rows=False
    )
    estimator = FederatedKMeans(
        2, privacy="dp", epsilon=1.0, bounds=(-6.0, 9.0), client_fraction=0.8, random_state=0
    )
    with use_runtime(lambda *a, **k: InProcessRuntime(*a, **{**k, "policy": policy})):
        estimator.fit(clients)
    assert estimator.privacy_spent_[0] == pytest.approx(1.0, rel=1e-6)


# --------------------------------------------------------------------------- #
# Attack (c): the coordinator announces the noise share
# --------------------------------------------------------------------------- #
def _noise_std(trusted, announced, n_draws=3000, in_sum=True):
    """Empirical std of a node's noisy inertia over many draws of its generator."""
    data, centers, sigma = _rows(n=20), HOSTILE_CENTERS["in the box"], 50.0
    exact = dp_inertia_exact(data, centers, LOWER, UPPER)[0]
    party = Party(0, 0, 11, policy=NodePolicy(privacy_ledger=False, dp_trusted_shares=trusted))
    noise, floors = [], set()
    for _ in range(n_draws):
        with inside_secure_sum() if in_sum else contextlib.nullcontext():
            reply = fedkmeans_dp_inertia(
                data, {TAG_CENTERS: centers}, {}, party, lower=LOWER, upper=UPPER,
                sigma=sigma, noise_share=announced, output=False,
            )  # fmt: skip
        noise.append(reply.send[0] - exact)
        floors.add(reply.keep[MIN_SURVIVORS])
    (floor,) = floors
    return float(np.std(noise)) / sigma, floor


@pytest.mark.parametrize(
    "trusted, announced, expected_share",
    [(1, 1000, 1), (1, 3, 1), (4, 1000, 4), (4, 2, 2)],
)
def test_attack_c_an_announced_share_never_lowers_the_noise_below_the_trusted_one(
    trusted, announced, expected_share
):
    std, floor = _noise_std(trusted, announced)
    # 3000 draws: the std's relative standard error is 1.3%.
    assert std == pytest.approx(1 / math.sqrt(expected_share), rel=0.06)
    assert std >= (1 / math.sqrt(trusted)) * 0.94
    # The sum must then hold as many survivors as the shares the node counted on.
    assert floor == expected_share


def test_a_release_outside_a_secure_sum_holds_the_whole_noise():
    # Run on its own (a clear sum) the server reads this one upload: the node
    # counts on no other share, whatever it trusts and the server announces.
    std, floor = _noise_std(trusted=8, announced=8, in_sum=False)
    assert std == pytest.approx(1.0, rel=0.06)
    assert floor == 1


@pytest.mark.parametrize("trusted", [1, 2, 3, 5])
def test_attack_c_two_colluders_out_of_three_get_the_whole_noise_of_an_honest_node(trusted):
    # Through the runtime: the coordinator announces t = 3 for a noisy Lloyd
    # sum of three nodes, two of them its own. An honest node's upload holds
    # its full sigma, and it needs no survivor but itself.
    from skfedclust.federation._runtime import client_step_name
    from skfedclust.node._sum_guard import RECORD
    from skfedclust.secure._secure_sum import TAG_UPLOAD, fixed_point_shift, secure_sum_upload_step

    data = _rows(n=90)
    federation = Federation(data, np.array_split(np.arange(len(data)), 3))
    federation.spawn_seeds(np.random.RandomState(1))
    policy = NodePolicy(
        dp_epsilon=1.0, privacy_ledger=False, min_rows_per_vector=None, refuse_raw_rows=False,
        dp_trusted_shares=trusted,
    )  # fmt: skip
    runtime = InProcessRuntime(federation, private_entropy=[3], policy=policy)
    aggregator = SecureAggregator(runtime, seed=0)
    aggregator.setup()
    participants = [0, 1, 2]
    runtime.broadcast(HOSTILE_CENTERS["in the box"], tag=TAG_CENTERS, clients=participants)
    runtime.run(
        secure_sum_upload_step, tag=TAG_UPLOAD, clients=participants,
        inner=client_step_name(fedkmeans_dp_lloyd_statistics),
        inner_public={"lower": LOWER, "upper": UPPER, "sigma": 10 * DIAGONAL, "noise_share": 3},
        sum_id=50, participants=participants, graph=aggregator.graph,
        threshold=aggregator._threshold(participants),
        shifts=[fixed_point_shift(1e6, 3)] * 2, n_clients=3,
    )  # fmt: skip
    # Inside the secure sum the node counts on min(3, trusted) shares, and the
    # sum must keep that many survivors (an operator who trusts 3 shares gets
    # the shared noise; one who trusts 1, the default, adds the whole sigma).
    for state in runtime.private_states():
        assert state[RECORD].open.min_survivors == min(3, trusted)


def test_a_simulated_party_counts_on_the_announced_shares():
    # In a simulation the user plays every party and the coordinator: the
    # estimators' shared noise (each of t clients adds sigma / sqrt(t)) holds.
    policy = NodePolicy.simulation()
    assert policy.dp_trusted_shares >= 2**31 - 1
    party = Party(0, 0, 11, policy=policy)
    with inside_secure_sum():
        reply = fedkmeans_dp_inertia(
            _rows(n=20), {TAG_CENTERS: HOSTILE_CENTERS["in the box"]}, {}, party, lower=LOWER,
            upper=UPPER, sigma=50.0, noise_share=7, output=False,
        )  # fmt: skip
    assert reply.keep[MIN_SURVIVORS] == 7


def test_a_node_reads_its_trusted_shares_from_its_node_config():
    assert NodePolicy.from_node_config({}).dp_trusted_shares == 1
    assert NodePolicy.from_node_config({"dp-trusted-shares": "3"}).dp_trusted_shares == 3
    with pytest.raises(ValueError, match="dp-trusted-shares"):
        NodePolicy.from_node_config({"dp-trusted-shares": "0"})


@pytest.mark.parametrize("init", ["sphere-packing", "random"])
def test_the_fixed_point_bounds_hold_every_node_adding_the_whole_noise(monkeypatch, init):
    # Nodes with the default dp-trusted-shares = 1 add the whole sigma to each
    # summand, whatever the estimator announces: the public fixed-point bounds
    # of the private sums leave each client 40 of those sigmas, not 40 of its
    # announced share (with a thousand clients, 40 / sqrt(501) would be
    # exceeded by nearly one draw in ten).
    from skfedclust.methods import _fedkmeans_dp

    margin, headroom = _fedkmeans_dp._MARGIN, _fedkmeans_dp._NOISE_HEADROOM
    rng = np.random.default_rng(0)
    clients = [rng.normal(size=(40 + i, 3)) for i in range(5)]
    n_c, half = max(len(c) for c in clients), 7.5
    asked = []
    original = _fedkmeans_dp.DPPlan.noisy_sum

    def recording(plan, adder, step, **public):
        asked.append((step.__name__, public, plan))
        return original(plan, adder, step, **public)

    monkeypatch.setattr(_fedkmeans_dp.DPPlan, "noisy_sum", recording)
    FederatedKMeans(2, privacy="dp", bounds=(-7.5, 7.5), init=init, random_state=0).fit(clients)
    assert {name for name, _, _ in asked} >= {
        "fedkmeans_dp_lloyd_statistics",
        "fedkmeans_dp_inertia",
    }
    for name, public, plan in asked:
        assert public["noise_share"] == 3  # a majority of five: announced, not trusted
        bounds = public["bounds"]
        if name == "fedkmeans_dp_lloyd_statistics":
            noise = [public["sigma"], 2 * public["sigma"] / plan.diagonal]
            data = [n_c * half, n_c]
        elif name == "fedkmeans_dp_inertia":
            noise, data = [public["sigma"]], [n_c * plan.diagonal**2]
        else:
            noise = [public["sigma_sums"], public["sigma_squares"]]
            data = [n_c * half, n_c * half**2]
        for bound, sigma, rows in zip(bounds, noise, data):
            assert bound >= margin * (rows + headroom * sigma) * (1 - 1e-12)
