"""FedSC's client steps: what a client computes and sends (Qiao, Ding & Fan, NeurIPS 2023).

A client perturbs its rows once where the fit is private by data, adds its
set-up statistics (feature sums, pair-distance totals, a one-hot local
dictionary size) to the fit's sums, and in every round of the factorisation
solves its coefficients, steps its copy of the dictionary and uploads it,
with its share of the noise where the fit is private by factors. The server
side and the estimator are in :mod:`skfedclust.methods._fedsc`.
"""

from __future__ import annotations

import numpy as np

from ..federation import Reply, bound_only, releases_nothing, summand, summary
from ..node._declarations import dp_release, on_private_rows
from ..node._dp import charge_node, private_normal
from ..node._policy import PRIVATE_ROWS
from ..node._sum_guard import SumRefusal
from ..secure._dp import clip_rows, coef_sensitivity, dictionary_sensitivity, relative_noise_scale
from ._fedsc_core import (
    MAX_SAMPLES,
    client_update,
    solve_coefficients,
)
from ._fedsc_hyperparameters import (
    n_components_auto,
    pair_distance_sum,
)

#: Largest noise standard deviation: perturbed values are squared (distances,
#: kernels, ``C^T K C``), and float64 squares overflow near 1e308.
MAX_NOISE_SCALE = 1e150

# Message tags.
TAG_STATS = "bandwidth and mean statistics"
TAG_ROWS = "rows for the pooled shortcut"
TAG_BANDWIDTH = "bandwidth"
TAG_RANK = "local dictionary size"
TAG_DICTIONARY = "dictionary"
TAG_UPLOAD = "local dictionary"
TAG_COEF = "coefficients"
TAG_LABELS = "labels"


def _client_rows(data, state):
    """The rows a client computes on: its data, or the clipped / perturbed copy it kept."""
    return state["rows"] if "rows" in state else data


def _perturb(matrix, noise, party, what):
    """Client-side noise on a release, before it is sent: ``(noisy, sigma)``.

    ``noise`` is ``None`` (no noise), ``("calibrated", clip_norm, sigma)``
    (rows clipped to ``clip_norm`` unless it is None, then ``N(0, sigma**2)``)
    or ``("ratio", alpha)`` (``N(0, (alpha std(matrix))**2)``, the paper's
    experiments). The noise comes from the party's cryptographic generator
    (:func:`~skfedclust.node._dp.private_normal`, ChaCha20 keyed by the
    node's entropy), which the server cannot replay.
    """
    if noise is None:
        return matrix, 0.0
    if noise[0] == "calibrated":
        sigma = noise[2]
        if noise[1] is not None:
            matrix = clip_rows(matrix, noise[1])
    else:
        sigma = relative_noise_scale(matrix, noise[1])
        if not sigma <= MAX_NOISE_SCALE:
            raise ValueError(
                f"noise_ratio={noise[1]:g} gives noise of standard deviation {sigma:.3g} on "
                f"this client's {what}, above {MAX_NOISE_SCALE:.0e}: float64 arithmetic on "
                "the perturbed values (squared distances, kernels) would overflow. Use a "
                "smaller noise_ratio."
            )
    matrix = np.asarray(matrix, dtype=np.float64)
    if not sigma > 0:
        return matrix.copy(), float(sigma)
    return matrix + private_normal(party, sigma, matrix.shape), sigma


def _node_budget(party):
    """Whether the node's policy sets its own differential-privacy budget."""
    return party.policy.dp_epsilon is not None


def _charge_node(state, party, releases):
    """Charge calibrated releases to the node's own accountant (what the step keeps).

    ``releases`` are ``(what, sensitivity, noise)``: the node computes each
    sensitivity from the clip it applies itself and the public constants it
    computes with, and refuses a release without calibrated noise. Nothing
    is charged or checked when the node's policy sets no budget.
    """
    if not _node_budget(party):
        return {}
    sigmas = []
    for what, sensitivity, noise in releases:
        if noise is None or noise[0] != "calibrated":
            raise SumRefusal(
                "dp-noise",
                f"the {what} would leave this node without calibrated noise; its policy "
                "sets a dp-epsilon budget",
            )
        sigmas.append((what, sensitivity, noise[2]))
    return charge_node(state, party, sigmas, 1)


def _positive(value, what):
    """``value`` as a finite float > 0, or a refusal (rule ``dp-inputs``)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if isinstance(value, bool) or not (np.isfinite(number) and number > 0):
        raise SumRefusal(
            "dp-inputs",
            f"{what}={value!r} is not a finite number > 0: the sensitivity this node "
            "charges is computed from it",
        )
    return number


def _check_factor_inputs(dictionary, bandwidth, reg, coef_clip):
    """The server's inputs of a charged FedSC factor release, checked by the node.

    The sensitivities (:func:`~skfedclust.secure.dictionary_sensitivity`,
    :func:`~skfedclust.secure.coef_sensitivity`) hold for a dictionary of any
    norm, duplicated atoms included (the ridge penalty keeps ``K(Z, Z) + lam
    I`` invertible), but only for finite numbers: a NaN atom has no kernel
    value. Returns the dictionary as float64.
    """
    dictionary = np.asarray(dictionary, dtype=np.float64)
    if dictionary.ndim != 2 or not dictionary.shape[0] or not np.all(np.isfinite(dictionary)):
        raise SumRefusal(
            "dp-inputs",
            "the dictionary is not a non-empty 2-D array of finite numbers: no sensitivity "
            "this node charges covers it",
        )
    _positive(bandwidth, "bandwidth")
    _positive(reg, "reg")
    if coef_clip is not None:
        _positive(coef_clip, "coef_clip")
    return dictionary


def _dictionary_sensitivity(bandwidth, n_components, learning_rate, reg, coef_clip):
    return dictionary_sensitivity(
        bandwidth=bandwidth,
        n_components=n_components,
        learning_rate=learning_rate,
        lam=reg,
        coef_clip=coef_clip,
    )


def _coef_sensitivity(reg, n_components, coef_clip):
    return coef_sensitivity(lam=reg, n_components=n_components, coef_clip=coef_clip)


def _require_private_rows(state, party, what):
    """Refuse a release of the raw rows' statistics where the node has a budget.

    Under ``privacy='data'`` every later release is computed on the perturbed
    rows the node kept (post-processing, free); without them a statistic of
    the rows carries no noise.
    """
    if _node_budget(party) and "rows" not in state:
        raise SumRefusal(
            "dp-noise",
            f"{what} of this node's rows would leave it without noise; its policy sets a "
            "dp-epsilon budget (the rows are not perturbed)",
        )


# ---------------------------------------------------------------- client side
# A summary, not rows by design: the pooled shortcut is the paper's experiments'
# shortcut, not its method, so a deployed node counts what it sends and refuses
# its rows (the noise scale of relative noise is one float, no vector).
@summary
@dp_release
def fedsc_prepare(
    data,
    inbox,
    state,
    party,
    *,
    data_noise,
    send_rows,
):
    """Client step: privatise the rows if asked, or send them for the pooled shortcut.

    With ``privacy='data'`` the client perturbs its rows once, here, and
    computes everything afterwards on the perturbed copy, which it keeps
    (``data_noise`` says how; calibrated noise clips the rows first); with
    relative noise it sends the noise's scale (one float). With ``send_rows``
    it sends the rows themselves (the pooled shortcut of the paper's
    experiments, which is not private). The set-up statistics the server
    needs only summed go through the fit's sum channel
    (:func:`fedsc_setup_sums`).
    """
    keep = {}
    send = {}
    rows = data
    if data_noise is not None:
        # The node's own charge, from the clip it applies: a replaced row moves
        # the perturbed rows by at most 2 clip_norm.
        clip = None if data_noise is None else data_noise[1]
        keep.update(_charge_node(state, party, [("rows", 2.0 * (clip or np.inf), data_noise)]))
        rows, sigma = _perturb(data, data_noise, party, "rows")
        keep["rows"] = rows
        keep[PRIVATE_ROWS] = True
        if data_noise[0] == "ratio":
            # Relative noise follows the spread of the private rows: only the
            # client knows its scale, and reports it (one float).
            send["noise_scale"] = np.float64(sigma)
    if send_rows:
        send["rows"] = rows
    if send and "rows" not in keep:
        _require_private_rows(state, party, "the set-up statistics")
    return Reply(send=send or None, keep=keep)


@on_private_rows
@bound_only
def fedsc_rows(data, inbox, state, party):
    """Client step for a public bound: the rows the client computes on.

    Under ``privacy='data'`` these are the perturbed rows it kept, so the
    bound (a histogram of binary orders the server learns from a secure sum)
    is post-processing of the release like everything else.
    """
    _require_private_rows(state, party, "a bound")
    return Reply(send=_client_rows(data, state))


@on_private_rows
def fedsc_distance_total(data, inbox, state, party, *, max_samples):
    """Client step for a public bound: the total distance between its distinct rows.

    Keeps ``(total, pairs)`` (:func:`~skfedclust.methods._fedsc_core.pair_distance_sum`)
    for the secure sum that follows, so both see the same value.
    """
    _require_private_rows(state, party, "the pair-distance total")
    total, pairs = _pair_distances(data, state, party, max_samples=max_samples)
    return Reply(send=np.array([total]), keep={"pair distances": (total, pairs)})


def _pair_distances(data, state, party, *, max_samples=MAX_SAMPLES):
    """The total distance between the client's distinct rows and their number of pairs."""
    return pair_distance_sum(
        _client_rows(data, state), max_samples=max_samples, random_state=party.seed
    )


@on_private_rows
@summand
def fedsc_setup_sums(data, inbox, state, party, *, send_sums, send_distance):
    """Client step: the set-up statistics the server only needs summed over the clients.

    As asked, the feature sums and the row count (the centre of the first
    dictionary: the global mean) and the total distance between distinct
    rows and their number of pairs (the federated bandwidth, kept by
    :func:`fedsc_distance_total`); added up by a secure sum.
    """
    _require_private_rows(state, party, "the set-up sums")
    rows = _client_rows(data, state)
    parts = ()
    if send_sums:
        parts += (rows.sum(axis=0), np.array([len(rows)], dtype=np.int64))
    keep = {}
    if send_distance:
        # Kept by the bound agreement of a secure sum, so that both see the same value.
        kept = state.get("pair distances")
        total, pairs = kept if kept is not None else _pair_distances(data, state, party)
        parts += (np.array([total]), np.array([pairs], dtype=np.int64))
        keep["pair distances"] = None
    return Reply(send=parts, keep=keep)


def _local_rank(party, data, inbox, state, *, bandwidth, energy, max_samples):
    """The dictionary-size rule (Eq. 43) on the client's own rows, and the bandwidth it used.

    A helper of :func:`fedsc_rank_histogram`, not a step: its parameters do not
    start with ``data, inbox, state, party``, so that no coordinator can name it.

    The rows' Gaussian kernel with the bandwidth (public, or broadcast): the
    number of its leading eigenvalues that hold ``energy`` of the total.
    """
    _require_private_rows(state, party, "the dictionary-size rule")
    bandwidth = _bandwidth_of(inbox, state, bandwidth)
    rows = _client_rows(data, state)
    rank = n_components_auto(
        rows, bandwidth=bandwidth, tol=energy, max_samples=max_samples, random_state=party.seed
    )
    return int(rank), bandwidth


@on_private_rows
@summand
def fedsc_rank_histogram(data, inbox, state, party, *, bandwidth, energy, max_samples, length):
    """Client step of a sum: the dictionary-size rule (Eq. 43) as a one-hot count.

    The number of leading eigenvalues of the client's kernel that hold
    ``energy`` of the total, sent as a vector of ``length`` zeros with a one at
    that rank: added up over the clients (by a secure sum by default), the
    server learns how many clients have each rank, not which client has which,
    and takes the largest.
    """
    rank, bandwidth = _local_rank(
        party, data, inbox, state, bandwidth=bandwidth, energy=energy, max_samples=max_samples
    )
    if not 0 <= rank < length:
        # A rank is at most the rows the rule reads (public: max_samples and
        # the client sizes); anything else would not fit the public length.
        raise ValueError(f"client {party.index}: rank {rank} outside [0, {length})")
    counts = np.zeros(length, dtype=np.int64)
    counts[rank] = 1
    return Reply(send=counts, keep={"bandwidth": bandwidth})


def _bandwidth_of(inbox, state, bandwidth):
    if bandwidth is not None:
        return bandwidth
    return inbox.get(TAG_BANDWIDTH, state.get("bandwidth"))


@dp_release
@on_private_rows
def fedsc_round(
    data,
    inbox,
    state,
    party,
    *,
    check_underflow,
    bandwidth,
    reg,
    z_update,
    learning_rate,
    coef_clip,
    dictionary_noise,
    send_count,
    send_objective,
    send_coef,
    coef_noise,
):
    """Client step of one round of stage I (Algorithm 1 of the paper).

    The client solves its coefficients for the broadcast dictionary in closed
    form (Eq. 14), takes one local step on its copy of the dictionary (the
    preconditioned step of the authors' code, or the gradient step of Eq. 16),
    perturbs it if asked and sends it (``"dictionary"``), with its sample
    count for the weighted mean (``"count"``), its objective ``f_p`` at the
    broadcast dictionary (``"objective"``, one float, unless
    ``send_objective`` is false) and, under relative noise, the noise scale it
    drew (``"noise_scale"``). With ``coef_clip`` the coefficients in the
    dictionary step are clipped to it (and, if sent, the coefficients).
    ``check_underflow`` lets the client refuse a dictionary out of reach of
    its rows (an error, which calibrated noise does not cover, so it is off
    there). With ``send_coef`` (the last round
    of ``final_coef='legacy'``) it also sends its coefficients (``"coef"``),
    perturbed if asked (and their relative noise scale,
    ``"coef_noise_scale"``).
    """
    r = _bandwidth_of(inbox, state, bandwidth)
    dictionary = inbox[TAG_DICTIONARY]
    rows = _client_rows(data, state)
    charged = "rows" not in state and _node_budget(party)
    if charged:
        _check_round_inputs(dictionary, r, reg, coef_clip, z_update, learning_rate, check_underflow)
    update = client_update(
        rows,
        dictionary,
        bandwidth=r,
        lam=reg,
        z_update=z_update,
        learning_rate=learning_rate,
        coef_clip=coef_clip,
        check_underflow=check_underflow,
    )
    keep = {"bandwidth": r}
    if charged:
        # Factors: the node charges each release, its sensitivity computed
        # from the constants it computes with (Eq. 14-16 with its clip).
        n_components = dictionary.shape[0]
        releases = [
            (
                "dictionary",
                _dictionary_sensitivity(r, n_components, learning_rate, reg, coef_clip),
                dictionary_noise,
            )
        ]
        if send_coef:
            releases.append(
                ("coefficients", _coef_sensitivity(reg, n_components, coef_clip), coef_noise)
            )
        if send_objective:
            raise SumRefusal(
                "dp-noise",
                "the objective of this node's rows would leave it without noise; its policy "
                "sets a dp-epsilon budget",
            )
        keep.update(_charge_node(state, party, releases))
    upload, sigma = _perturb(update.dictionary, dictionary_noise, party, "dictionary")
    send = {"dictionary": upload}
    if send_count:
        send["count"] = len(rows)
    if send_objective:
        send["objective"] = np.float64(update.objective)
    if _relative(dictionary_noise):
        send["noise_scale"] = np.float64(sigma)
    if send_coef:
        # Noise and clipping act on one sample's vector: a row of C^T.
        coef, coef_sigma = _perturb(update.coef.T, coef_noise, party, "coefficients")
        send["coef"] = coef.T
        if _relative(coef_noise):
            send["coef_noise_scale"] = np.float64(coef_sigma)
    return Reply(send=send, keep=keep)


def _check_round_inputs(dictionary, bandwidth, reg, coef_clip, z_update, learning_rate, check):
    """What a charged dictionary release takes from the server, checked by the node.

    The dictionary's sensitivity is that of one gradient step of a fixed size
    (Eq. 16): the preconditioned step scales by the rows' own kernel, and a
    data-dependent step size is not covered; the underflow check raises an
    error that depends on the rows, which no noise covers. Each is refused
    (rule ``dp-inputs``), whatever the coordinator asks.
    """
    _check_factor_inputs(dictionary, bandwidth, reg, coef_clip)
    if z_update != "gradient":
        raise SumRefusal(
            "dp-inputs",
            f"z_update={z_update!r}: the dictionary's sensitivity this node charges is that "
            "of the gradient step (Eq. 16)",
        )
    if isinstance(learning_rate, str):
        raise SumRefusal(
            "dp-inputs", f"learning_rate={learning_rate!r}: a data-dependent step is not covered"
        )
    _positive(learning_rate, "learning_rate")
    if check:
        raise SumRefusal(
            "dp-inputs",
            "check_underflow: whether it raises depends on the rows, and no noise covers it",
        )


def _relative(noise):
    """Whether the noise is relative to the spread of what it perturbs (its scale is private)."""
    return noise is not None and noise[0] == "ratio"


@dp_release
@on_private_rows
def fedsc_coefficients(data, inbox, state, party, *, reg, coef_noise):
    """Client step: coefficients of the client's rows for the final dictionary.

    ``C_p = (K(Z, Z) + reg I)^-1 K(Z, X_p)``, perturbed if asked, then sent
    (``"coef"``, one column per sample, as in the paper), with the scale of
    relative noise (``"noise_scale"``). Calibrated noise clips every
    coefficient vector to ``coef_clip`` first, if given.
    """
    dictionary = inbox[TAG_DICTIONARY]
    rows = _client_rows(data, state)
    keep = {}
    charged = "rows" not in state and _node_budget(party)
    if charged:
        clip = None if coef_noise is None else coef_noise[1]
        dictionary = _check_factor_inputs(dictionary, state.get("bandwidth"), reg, clip)
        sensitivity = _coef_sensitivity(reg, dictionary.shape[0], clip)
        keep = _charge_node(state, party, [("coefficients", sensitivity, coef_noise)])
    coef = solve_coefficients(rows, dictionary, bandwidth=state["bandwidth"], lam=reg)
    # Noise and clipping act on one sample's vector: a row of C^T.
    noisy, sigma = _perturb(coef.T, coef_noise, party, "coefficients")
    send = {"coef": noisy.T}
    if _relative(coef_noise):
        send["noise_scale"] = np.float64(sigma)
    return Reply(send=send, keep=keep)


@releases_nothing
def fedsc_receive_labels(data, inbox, state, party):
    """Client step (no message): the labels of the client's own samples are its output."""
    return Reply(output={"labels": np.asarray(inbox[TAG_LABELS])})
