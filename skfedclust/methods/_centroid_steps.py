"""Client steps shared by the centroid methods.

Each is a client step of the protocol runtime: ``step(data, inbox, state, party,
**public) -> Reply``. It sees the client's own rows and what the server sent it.
"""

from __future__ import annotations

import numpy as np

from ..clusterers import nearest_center
from ..federation import Reply

__all__ = ["label_by_nearest_center", "lloyd_statistics"]


def label_by_nearest_center(data, inbox, state, party, *, centers_tag="global centers"):
    """Label the client's rows by the nearest center the server sent; output the labels.

    Nothing is sent: the labels are the client's own output, for its own user.
    """
    return Reply(output={"labels": nearest_center(data, inbox[centers_tag])})


def lloyd_statistics(data, inbox, state, party, *, centers_tag="global centers"):
    """One federated Lloyd iteration, client side: send per-center sums and counts.

    Sums are taken relative to the first center, so a large common offset
    costs no precision; the server adds it back
    (:func:`lloyd_server_update`).
    """
    centers = inbox[centers_tag]
    labels = nearest_center(data, centers)
    sums = np.zeros_like(centers)
    np.add.at(sums, labels, data - centers[0])
    counts = np.bincount(labels, minlength=len(centers))
    return Reply(send=(sums, counts), keep={"labels": labels})
