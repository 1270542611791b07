"""Custom kernels in StableHLO: a user's StableHLO function as the tpu kernel
of an operator defined with torch.library.

    @torch.library.custom_op("mylib::silu", mutates_args=())
    def silu(x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)                 # the CPU (reference) kernel

    @silu.register_fake
    def _(x):
        return torch.empty_like(x)                  # shapes for tpu and compile

    torch_tpu.library.register_stablehlo_kernel(silu, '''
      func.func @main(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
        %s = stablehlo.logistic %x : tensor<4x8xf32>
        %y = stablehlo.multiply %x, %s : tensor<4x8xf32>
        return %y : tensor<4x8xf32>
      }''')

The text is an MLIR module or `func.func` definitions (StableHLO/CHLO ops,
pretty or generic form); its entry is `@main` or its only public function.
A kernel's types are static: register one text per input signature (the
call picks the kernel whose parameters are its inputs' types; jax.export
makes one per shape). The kernel is inlined into the program that calls it,
so it runs in Strict and Debug Eager, inside Fused Eager programs and inside
torch.compile(backend="tpu") graphs; autograd comes from the operator's
register_autograd. No JAX is needed at run time.
"""
from . import _C

__all__ = ["register_stablehlo_kernel", "stablehlo_kernels"]


def _qualified_name(op) -> str:
    """"ns::name[.overload]" of a CustomOpDef, OpOverload(Packet) or string."""
    if isinstance(op, str):
        return op
    qualname = getattr(op, "_qualname", None)  # torch.library.custom_op
    if isinstance(qualname, str):
        return qualname
    name = getattr(op, "_qualified_op_name", None)  # OpOverloadPacket
    if isinstance(name, str):
        return name
    if hasattr(op, "name") and callable(op.name):  # OpOverload: "ns::name.overload"
        return op.name()
    raise TypeError(f"register_stablehlo_kernel takes an operator (a torch.library.custom_op, "
                    f"torch.ops.ns.name[.overload] or 'ns::name'), not {type(op).__name__}")


def register_stablehlo_kernel(op, text: str) -> None:
    """Makes the StableHLO function `text` the tpu kernel of `op` for the input
    types of its signature. Raises ValueError for an unknown or mutating
    operator, non-tensor arguments, a kernel whose arity differs from the
    operator's, unparsable text, or a second kernel for the same types."""
    if not isinstance(text, str):
        raise TypeError(f"a StableHLO kernel is text (str), not {type(text).__name__}")
    _C._register_stablehlo_kernel(_qualified_name(op), text)


def stablehlo_kernels():
    """(operator, kernel symbol) for every registered StableHLO kernel."""
    return list(_C._stablehlo_kernels())
