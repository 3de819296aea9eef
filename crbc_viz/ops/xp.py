"""One source for numpy and torch: the array namespace of an input (`array_api_compat`, as
scikit-learn uses it) and the segment reductions the array API does not have.

A primitive written against ``xp = namespace(x)`` runs on numpy arrays (the references) and on
torch tensors on any device (the torch backend passes its tensors), so the math of a statistic
is written once. The segment reductions keep each library's own scatter (numpy's ``bincount``
and ``ufunc.at``, torch's ``index_add_`` and ``scatter_reduce``): a numpy call gives the bits it
gave before this module existed. Nothing here imports torch; `array_api_compat` loads its torch
namespace only when it is handed a tensor.
"""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace, is_torch_array

__all__ = [
    "namespace",
    "float_array",
    "as_numpy",
    "asarray_like",
    "copy",
    "seg_sum",
    "seg_max",
    "seg_min",
    "unit_roundoff",
]


def namespace(*arrays):
    """The array-API namespace of ``arrays`` (numpy's for numpy arrays and Python sequences)."""
    arrays = [a for a in arrays if a is not None and not isinstance(a, (int, float))]
    if not arrays or not any(is_torch_array(a) for a in arrays):
        return array_namespace(np.empty(0))
    return array_namespace(*arrays)


def float_array(x, like=None):
    """``x`` as a floating array: numpy input (or a sequence) as float64; a tensor keeps its
    floating dtype (a float32 path stays float32), an integer or bool tensor becomes float64.
    ``like``: convert to its dtype and device instead."""
    if like is not None and is_torch_array(like):
        return x.to(dtype=like.dtype, device=like.device) if is_torch_array(x) else _tensor_like(x, like)
    if is_torch_array(x):
        return x if x.is_floating_point() else x.double()
    return np.asarray(x, dtype=np.float64)


def as_numpy(x):
    """The estimators' default converter ``to``: a graph's numpy array as it is (no copy).

    An estimator written once takes ``to=`` (numpy array → the arrays it computes on); the
    torch backend passes one that puts the array on its device (``backends.torch.arrays``)."""
    return np.asarray(x)


def asarray_like(x, like):
    """A graph's numpy array ``x`` in ``like``'s library, on its device (``x`` itself for numpy)."""
    if is_torch_array(like):
        return namespace(like).asarray(np.ascontiguousarray(x), device=like.device)
    return np.asarray(x)


def copy(x):
    """A copy of ``x`` in its own library (on its device)."""
    return x.clone() if is_torch_array(x) else np.array(x, copy=True)


def _tensor_like(x, like):
    xp = namespace(like)
    return xp.asarray(np.asarray(x), dtype=like.dtype, device=like.device)


def seg_sum(x, seg, num: int):
    """Σ of ``x`` per segment ``seg`` (ids in [0, num)) ``[num]``, in ``x``'s dtype."""
    if is_torch_array(x):
        return x.new_zeros(num).index_add_(0, seg, x)
    return np.bincount(seg, weights=x, minlength=num)


def seg_max(x, seg, num: int, initial: float):
    """max of ``x`` per segment ``[num]``; ``initial`` where a segment is empty."""
    if is_torch_array(x):
        return x.new_full((num,), initial).scatter_reduce(0, seg, x, "amax")
    out = np.full(num, initial, dtype=np.float64)
    np.maximum.at(out, seg, x)
    return out


def seg_min(x, seg, num: int, initial: float):
    """min of ``x`` per segment ``[num]``; ``initial`` where a segment is empty."""
    if is_torch_array(x):
        return x.new_full((num,), initial).scatter_reduce(0, seg, x, "amin")
    out = np.full(num, initial, dtype=np.float64)
    np.minimum.at(out, seg, x)
    return out


def unit_roundoff(x) -> float:
    """The round-off unit of ``x``'s dtype: float32's on a float32 path, else float64's."""
    return (
        float(np.finfo(np.float32).eps)
        if str(x.dtype).endswith("float32")
        else float(np.finfo(np.float64).eps)
    )
