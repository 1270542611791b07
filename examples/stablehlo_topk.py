"""A top-k kernel written in StableHLO, used as a PyTorch op on tpu tensors:
the router of a small mixture-of-experts layer, trained in Fused Eager and
under torch.compile(backend="tpu").

    python examples/stablehlo_topk.py

`torch_tpu.library.register_stablehlo_kernel` makes a StableHLO function the
tpu kernel of a `torch.library.custom_op` for the input types of its
signature (one function per shape); the op keeps its CPU kernel
(`torch.topk`) and its fake function, so it runs in every eager mode and
inside compiled graphs, where the StableHLO is inlined into the program.
No JAX is involved: the kernel is text.
"""
import torch
import torch.nn.functional as F

import torch_tpu
import torch_tpu.library

_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16"}


def topk_text(rows: int, cols: int, k: int, dtype: torch.dtype = torch.float32) -> str:
    """Top-`k` along the last dimension of a [rows, cols] tensor, largest
    first: a stable sort of (value, index) pairs by value, descending, then
    the first `k` columns of each. Equal values keep their index order."""
    t = _DTYPES[dtype]
    x, i = f"tensor<{rows}x{cols}x{t}>", f"tensor<{rows}x{cols}xi64>"
    v, j = f"tensor<{rows}x{k}x{t}>", f"tensor<{rows}x{k}xi64>"
    return f"""
func.func @main(%x: {x}) -> ({v}, {j}) {{
  %i = stablehlo.iota dim = 1 : {i}
  %s:2 = "stablehlo.sort"(%x, %i) ({{
  ^bb0(%a: tensor<{t}>, %b: tensor<{t}>, %c: tensor<i64>, %d: tensor<i64>):
    %gt = stablehlo.compare GT, %a, %b, FLOAT : (tensor<{t}>, tensor<{t}>) -> tensor<i1>
    stablehlo.return %gt : tensor<i1>
  }}) {{dimension = 1 : i64, is_stable = true}} : ({x}, {i}) -> ({x}, {i})
  %v = stablehlo.slice %s#0 [0:{rows}, 0:{k}] : ({x}) -> {v}
  %j = stablehlo.slice %s#1 [0:{rows}, 0:{k}] : ({i}) -> {j}
  return %v, %j : {v}, {j}
}}"""


@torch.library.custom_op("examples::top2", mutates_args=())
def top2(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The two largest values of each row of a 2-D tensor and their indices
    (the CPU kernel; tpu runs the StableHLO registered for its shape)."""
    values, indices = torch.topk(x, 2, dim=-1)
    return values, indices


@top2.register_fake
def _(x):
    return x.new_empty(x.shape[:-1] + (2,)), x.new_empty(x.shape[:-1] + (2,), dtype=torch.long)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output[1])
    ctx.cols = inputs[0].shape[-1]


def _backward(ctx, grad_values, grad_indices):
    # The gradient of each selected value goes back to its column.
    (indices,) = ctx.saved_tensors
    grad = grad_values.new_zeros(grad_values.shape[:-1] + (ctx.cols,))
    return grad.scatter(-1, indices, grad_values)


top2.register_autograd(_backward, setup_context=_setup_context)


def register(rows: int, experts: int) -> None:
    """The tpu kernel of examples::top2 for [rows, experts] f32 logits."""
    torch_tpu.library.register_stablehlo_kernel(top2, topk_text(rows, experts, 2))


class MoE(torch.nn.Module):
    """Each token goes to its two highest-scoring experts (the StableHLO
    top-k), weighted by a softmax over those two scores. The experts are
    computed densely and gathered: small, and static in shape."""

    def __init__(self, features=16, experts=4, classes=3):
        super().__init__()
        self.router = torch.nn.Linear(features, experts)
        self.experts = torch.nn.Parameter(torch.randn(experts, features, features) / features**0.5)
        self.head = torch.nn.Linear(features, classes)

    def forward(self, x):
        scores, chosen = top2(self.router(x))                            # [tokens, 2]
        weights = scores.softmax(-1)
        every = torch.einsum("tf,efg->teg", x, self.experts)            # [tokens, experts, features]
        picked = every.gather(1, chosen.unsqueeze(-1).expand(-1, -1, every.shape[-1]))
        mixed = (weights.unsqueeze(-1) * picked).sum(1)
        return self.head(torch.relu(mixed))


def train(device: str, mode: str = "DEFER_AND_FUSE", compiled: bool = False, steps: int = 5):
    """Trains MoE for `steps` SGD steps on a fixed batch; returns the last
    loss and the parameters (on the host)."""
    torch.manual_seed(0)
    x, y = torch.randn(32, 16), torch.randint(0, 3, (32,))
    model = MoE().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    forward = torch.compile(model, backend="tpu") if compiled else model
    with torch_tpu.eager_mode(mode):
        for _ in range(steps):
            loss = F.cross_entropy(forward(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return loss.detach().cpu(), [p.detach().cpu() for p in model.parameters()]


if __name__ == "__main__":
    register(rows=32, experts=4)
    cpu_loss, cpu_params = train("cpu")
    for name, mode, compiled in (("Fused Eager", "DEFER_AND_FUSE", False),
                                 ("compiled", "DEFER_NEVER", True)):
        with torch.tpu.precision("highest"):
            loss, params = train("tpu", mode, compiled)
        worst = max((p - q).abs().max().item() for p, q in zip(params, cpu_params))
        print(f"{name}: loss after 5 steps {loss.item():.4f} (CPU {cpu_loss.item():.4f}), "
              f"largest parameter difference from CPU {worst:.1e}")
