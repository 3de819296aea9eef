"""The numba shim of the compiled engine: ``njit`` and ``prange`` (plain Python when numba is
not installed, so that the engine's modules import without it) and the bit intrinsics its
masked solve uses."""

from __future__ import annotations

import numpy as np

__all__ = ["numba", "njit", "prange", "lowest_bit", "highest_bit", "above"]

try:  # numba is an extra (crbc-viz[numba]); the module must import without it
    import numba
    from numba.extending import intrinsic

    njit, prange = numba.njit, numba.prange

    @intrinsic
    def lowest_bit(typingctx, x):
        """Index of the lowest set bit of the uint64 ``x`` (not 0): one ``tzcnt``."""
        sig = numba.types.uint64(numba.types.uint64)
        # (cttz's second operand, "zero is poison", is an i1: numba's boolean constant)
        return sig, lambda context, builder, sig, args: builder.cttz(
            args[0], context.get_constant(numba.types.boolean, True)
        )

    @intrinsic
    def highest_bit(typingctx, x):
        """Index of the highest set bit of the uint64 ``x`` (not 0): 63 − ``lzcnt``."""
        sig = numba.types.int64(numba.types.uint64)

        def codegen(context, builder, sig, args):
            lz = builder.ctlz(args[0], context.get_constant(numba.types.boolean, True))
            return builder.sub(context.get_constant(numba.types.int64, 63), lz)

        return sig, codegen


except ImportError:  # pragma: no cover
    numba = None
    prange = range

    def njit(*_args, **_kwargs):
        return lambda f: f

    def lowest_bit(x):
        return (x & -x).bit_length() - 1

    def highest_bit(x):
        return int(x).bit_length() - 1


@njit(cache=True, nogil=True, inline="always")
def above(c):
    """The uint64 mask of the columns right of column ``c`` (0 for c = 63)."""
    return ~((np.uint64(2) << np.uint64(c)) - np.uint64(1))
