"""The federated clustering methods: one module per method.

Each module holds one method's client steps, its server steps and its
estimator side by side, written against the protocol runtime of
:mod:`skfedclust.federation`; the reusable algorithms they run live in
:mod:`skfedclust.clusterers` and the privacy primitives in
:mod:`skfedclust.secure`.
"""

from ._base import BaseFederatedClustering, CentroidPredictMixin
from ._dc import DCClustering
from ._feca import FeCA, feca_aggregate
from ._fedkmeans import FederatedKMeans
from ._fedsc import FedSpectralClustering
from ._ffcm import FederatedFuzzyCMeans
from ._gold import GOLDClustering
from ._kfed import KFed
from ._kumar import KumarFederatedKMeans
from ._mavg import MAvg
from ._omnifc import OmniFCClustering

__all__ = [
    "BaseFederatedClustering",
    "CentroidPredictMixin",
    "DCClustering",
    "FeCA",
    "FedSpectralClustering",
    "FederatedFuzzyCMeans",
    "FederatedKMeans",
    "GOLDClustering",
    "KFed",
    "KumarFederatedKMeans",
    "MAvg",
    "OmniFCClustering",
    "feca_aggregate",
]
