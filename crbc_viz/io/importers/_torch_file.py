"""Reading a ``torch.save`` file (slime's debug rollout dump, GraphGPO's saved batch) without
running its pickle: ``torch.load(..., weights_only=True)``, so only plain values and tensors come
back, plus the few globals a caller names (numpy's array rebuild for a verl ``DataProto``'s
``non_tensor_batch``; inert stand-ins for ``tensordict``'s ``TensorDict``, which record its
state and run none of its code). A file that needs any other class is refused by the class's
name, in one line; nothing of it is executed.

`has_keys` peeks at a file for a format sniff: whether its pickle's bytes hold some text
constants (searched, never executed).
"""

from __future__ import annotations

import re
import zipfile

from ...errors import LoadError, Problem
from .. import _guards
from ..readers._json import SURROGATE

__all__ = ["TORCH_SUFFIXES", "has_keys", "load", "TensorDictState", "fix_text"]

#: File names a torch.save dump has (slime ``.pt``, GraphGPO ``.pth``).
TORCH_SUFFIXES = (".pt", ".pth")


def _pickle_name(z: zipfile.ZipFile) -> str | None:
    names = [n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl"]
    return names[0] if len(names) == 1 else None


def _encoded(key: str) -> tuple[bytes, ...]:
    """The ways a pickle writes ``key`` as a text constant (protocol 2's BINUNICODE, protocol
    4's SHORT_BINUNICODE)."""
    b = key.encode()
    out = (b"X" + len(b).to_bytes(4, "little") + b,)
    return out + ((b"\x8c" + bytes([len(b)]) + b,) if len(b) < 256 else ())


def has_keys(path: str, keys: tuple[str, ...]) -> bool:
    """Whether ``path`` is a torch zip file whose pickle holds every text constant of ``keys``:
    its bytes are searched, never unpickled (a sniff; False on anything unreadable)."""
    if not str(path).lower().endswith(TORCH_SUFFIXES):
        return False
    try:
        _guards.check_input_file(path)
        with zipfile.ZipFile(path) as z:
            name = _pickle_name(z)
            cap = _guards.mib_setting(_guards.ENV_MAX_INPUT, _guards.MAX_INPUT_MB)
            if name is None or z.getinfo(name).file_size > cap:  # the input limit, as `load`
                return False
            data = z.read(name)
    except (LoadError, OSError, zipfile.BadZipFile, ValueError, EOFError, KeyError, RuntimeError):
        return False
    return all(any(e in data for e in _encoded(k)) for k in keys)


class TensorDictState:
    """Stand-in for ``tensordict.TensorDict`` while loading: keeps the pickled state (its
    ``_tensordict`` of tensors, ``_batch_size`` ...) and runs nothing else."""

    def __init__(self, state=None):
        self.state = state if isinstance(state, dict) else {}

    def __setstate__(self, state):
        self.state = state if isinstance(state, dict) else {}

    @property
    def tensors(self) -> dict:
        td = self.state.get("_tensordict")
        return td if isinstance(td, dict) else {}


def _make_td(cls, state, *rest):
    """Stand-in for ``tensordict._reductions._make_td`` (tensordict >= 0.6 pickles a TensorDict
    as ``_make_td(TensorDict, state)``)."""
    return TensorDictState(state)


def _numpy_globals() -> list:
    import numpy as np

    try:
        from numpy._core import multiarray
    except ImportError:  # numpy < 2
        from numpy.core import multiarray
    out: list = [np.ndarray, np.dtype]
    for base in ("numpy.core.multiarray", "numpy._core.multiarray"):
        out += [(multiarray._reconstruct, f"{base}._reconstruct"), (multiarray.scalar, f"{base}.scalar")]
    out += [
        (cls, f"numpy.dtypes.{cls.__name__}")
        for cls in (type(np.dtype(t)) for t in ("O", "f4", "f8", "i4", "i8", "b1", "U1", "i2", "u1"))
    ]
    return out


def _tensordict_globals() -> list:
    return [
        (TensorDictState, "tensordict._td.TensorDict"),
        (TensorDictState, "tensordict.TensorDict"),
        (_make_td, "tensordict._reductions._make_td"),
    ]


_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def _refusal(path: str, exc: BaseException, what: str) -> LoadError:
    text = str(exc)
    m = _GLOBAL.search(text)
    if m:
        why = (
            f"needs {m.group(1)}, which is not a plain value or tensor: refused, never unpickled "
            f"(a {what} holds only plain values and tensors)"
        )
    else:
        skip = ("Weights only load failed", "Check the documentation")
        lines = [s.strip() for s in text.splitlines() if s.strip() and not s.strip().startswith(skip)]
        first = lines[0] if lines else type(exc).__name__
        why = f"not a readable torch.save file ({first[:200]})"
    return LoadError([Problem(path, None, None, why)])


def load(path: str, what: str, *, numpy: bool = False, tensordict: bool = False):
    """``torch.load(path, weights_only=True)`` on the CPU, with numpy's arrays and tensordict's
    stand-ins allowed when asked.

    Raises:
        MissingExtra: torch is not installed (the ``torch`` extra).
        LoadError: one line naming the file: a class the file needs that is not allowed (by
            name), a file that is not a torch.save file, or the input size limit passed.
    """
    from ..._extras import require

    torch = require("torch", f"reading a {what}")
    st = _guards.check_input_file(path)
    cap = _guards.mib_setting(_guards.ENV_MAX_INPUT, _guards.MAX_INPUT_MB)
    if st.st_size > cap:
        raise _guards.limit_error(path, f"file is larger than {cap >> 20} MiB", _guards.ENV_MAX_INPUT)
    allowed = (_numpy_globals() if numpy else []) + (_tensordict_globals() if tensordict else [])
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location="cpu", weights_only=True)
    except MemoryError:
        raise LoadError([Problem(path, None, None, "too large to load into memory")]) from None
    except Exception as exc:  # noqa: BLE001 - any failure of an untrusted file is one line
        raise _refusal(path, exc, what) from None


def fix_text(cols: dict) -> list[str]:
    """Lone UTF-16 surrogates (not valid Unicode text; a pickle keeps them, no UTF-8 writer and
    no Arrow string column does) in the text values of ``cols`` (name -> list of values)
    replaced by U+FFFD, in place; the note saying how many (none when there were none)."""
    count = 0
    for values in cols.values():
        if not isinstance(values, list):
            continue
        for i, v in enumerate(values):
            if isinstance(v, str) and SURROGATE.search(v):
                values[i], n = SURROGATE.subn("\ufffd", v)
                count += n
    if not count:
        return []
    return [f"{count} lone UTF-16 surrogate(s) (not valid Unicode text) replaced by U+FFFD"]
