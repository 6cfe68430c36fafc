"""skfedclust: federated clustering for scikit-learn.

Each estimator simulates a multi-party protocol faithfully (what each client
computes, what crosses the wire, what the server learns) behind the usual
``fit`` / ``predict`` / ``labels_`` API.
"""

from . import clusterers, datasets, federation, metrics, partition, preprocessing
from .federation import SERVER, Federation, Ledger
from .methods import (
    BaseFederatedClustering,
    DCClustering,
    FeCA,
    FederatedFuzzyCMeans,
    FederatedKMeans,
    FedSpectralClustering,
    GOLDClustering,
    KFed,
    KumarFederatedKMeans,
    MAvg,
    OmniFCClustering,
    feca_aggregate,
)
from .preprocessing import FederatedMinMaxScaler, FederatedStandardScaler

__version__ = "0.1.0.dev0"

__all__ = [
    "BaseFederatedClustering",
    "DCClustering",
    "FeCA",
    "FedSpectralClustering",
    "FederatedFuzzyCMeans",
    "FederatedKMeans",
    "FederatedMinMaxScaler",
    "FederatedStandardScaler",
    "Federation",
    "GOLDClustering",
    "KFed",
    "KumarFederatedKMeans",
    "Ledger",
    "MAvg",
    "OmniFCClustering",
    "SERVER",
    "__version__",
    "feca_aggregate",
    "clusterers",
    "datasets",
    "federation",
    "metrics",
    "partition",
    "preprocessing",
]
