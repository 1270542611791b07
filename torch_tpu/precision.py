"""Matmul precision of f32 matmuls and convolutions on `tpu`.

    torch.tpu.precision("high")            # sets it for the rest of the program
    with torch.tpu.precision("highest"):   # or only inside the block
        y = a @ b
    torch.tpu.get_precision()              # -> "default"

| mode      | alias       | f32 matmul computed as                          | cost  |
| --------- | ----------- | ----------------------------------------------- | ----- |
| "default" | "medium"    | operands rounded to bf16, f32 accumulation      | 1x    |
| "high"    |             | bf16x3 split (hi/lo terms)                      | ~3x   |
| "highest" |             | bf16x6 split, close to f32                      | ~6x   |
| "float32" | "ieee"      | the plugin's own f32 matmul                     | plugin |

The same numbers on every plugin (XLA:CPU, XLA:GPU, TPU): the splits are
emitted explicitly. Without a `torch.tpu.precision` setting,
`torch.set_float32_matmul_precision` chooses ("medium" → default, "high" →
high, "highest" → highest) once it has been called; otherwise the mode is
"default", as on a TPU. bf16/f16 matmuls always accumulate in f32.

`torch.tpu.Precision` names the modes as the reference TorchTPU does
(`Precision.DEFAULT`, `HIGH`, `HIGHEST`) plus our `FLOAT32`; it is accepted
wherever a mode string is.
"""
import enum

from . import _C

_MODES = ("default", "high", "highest", "float32")
_ALIASES = {"medium": "default", "ieee": "float32", "fp32": "float32"}


class Precision(enum.Enum):
    DEFAULT = "default"
    HIGH = "high"
    HIGHEST = "highest"
    FLOAT32 = "float32"


def _code(mode) -> int:
    if isinstance(mode, enum.Enum) and type(mode).__name__ == "Precision":
        mode = mode.name  # ours, or the reference's enum of the same names
    if isinstance(mode, str):
        name = mode.lower()
        name = _ALIASES.get(name, name)
        if name in _MODES:
            return _MODES.index(name)
    valid = ", ".join(repr(m) for m in _MODES + tuple(_ALIASES))
    raise ValueError(f"unknown tpu matmul precision {mode!r}; valid modes: {valid}")


def get_precision() -> str:
    """The mode f32 matmuls on tpu record with now."""
    return _MODES[_C._current_precision()]


def set_precision(mode) -> None:
    """Sets the mode for f32 matmuls on tpu; None returns to the default
    (torch.set_float32_matmul_precision, else "default")."""
    _C._set_precision(-1 if mode is None else _code(mode))


class precision:
    """Sets the tpu matmul precision; as a context manager, only inside the
    block (the previous setting comes back on exit)."""

    def __init__(self, mode):
        code = -1 if mode is None else _code(mode)
        self._previous = _C._get_precision_override()
        self.mode = None if mode is None else _MODES[code]
        _C._set_precision(code)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _C._set_precision(self._previous)
        return False

    def __repr__(self):
        return f"torch.tpu.precision({self.mode!r})"


__all__ = ["Precision", "precision", "get_precision", "set_precision"]
