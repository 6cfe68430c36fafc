"""Find every estimator the package exports."""

from __future__ import annotations

import inspect

from sklearn.base import BaseEstimator, ClusterMixin


def all_estimators():
    """Every public clustering estimator of :mod:`skfedclust`, sorted by name.

    Returns
    -------
    estimators : list of (str, type)
        Name and class of each estimator exported in ``skfedclust.__all__``.

    Examples
    --------
    >>> from skfedclust.utils import all_estimators
    >>> "KFed" in dict(all_estimators())
    True
    """
    import skfedclust

    found = []
    for name in skfedclust.__all__:
        obj = getattr(skfedclust, name)
        if (
            inspect.isclass(obj)
            and issubclass(obj, ClusterMixin)
            and issubclass(obj, BaseEstimator)
            and not inspect.isabstract(obj)
            and not name.startswith("Base")
        ):
            found.append((name, obj))
    return sorted(found)
