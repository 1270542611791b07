"""Bounded dynamic dimensions for torch.compile(backend="tpu").

A graph that Dynamo traced with symbolic sizes (``dynamic=True``,
``torch._dynamo.mark_dynamic``, ``torch.tpu.mark_dynamic`` or Dynamo's
automatic dynamic shapes after a recompile) is compiled once per *bucket*,
not once per size: each symbol's value is rounded up to one of a few bucket
sizes (at most ``num_dynamic_buckets``, <= 8), the inputs are padded to the
bucket, and on entry the program is told each varying dimension's true length
(``torch.ops.tpu._bounded_dim``: StableHLO ``set_dimension_size``). XLA's
dynamic padder then masks every reduction, dot and softmax over the padded
elements, so sums, means, softmax, layer norm, attention and losses give the
unpadded result. Results leave the program padded (``_static_dim``) and are
handed back as views of their valid part: a later graph takes them without a
copy.

A reshape that merges a varying dimension with one before it ([b, n, d] ->
[b*n, d]: every linear layer at batch > 1, and an embedding's [b, n]
indices) would let XLA pack the valid elements at the front, which no later
split can undo; such a tensor runs in its static padded form while the ops
treat each position on its own, and takes XLA's packed form where one reads
across positions, leaves the graph or is saved for the backward (`_Merges`).

What cannot be bucketed exactly is refused, never approximated: a graph
with an op outside the list in _bucket_plan.py, a slice or concatenation
along a varying dimension (other than dropping its first positions or
padding its end), a gather along one with indices other than arange of its
size, or a size used as a value other than a Scalar operand runs specialized
per size, as before, with one warning naming the reason. docs/design.md
("Varying sizes") has the reasons.
"""
import math
import warnings

import torch

from ._bucket_plan import Plan, Refused, _expr, _val, symbolic  # noqa: F401  (Plan, Refused: compiler.py)

MAX_BUCKETS = 8
DEFAULT_BUCKETS = 4
_OPEN_MIN = 16  # sizes without an upper bound: powers of two from here

_OPTIONS = ("num_dynamic_buckets", "bucket_size")


def check_options(options):
    """(num_dynamic_buckets, bucket_size) from a torch.compile options dict;
    ValueError for a bad value."""
    options = options or {}
    num = options.get("num_dynamic_buckets")
    num = DEFAULT_BUCKETS if num is None else num
    if isinstance(num, bool) or not isinstance(num, int) or not 1 <= num <= MAX_BUCKETS:
        raise ValueError(f"torch_tpu: `num_dynamic_buckets` must be an integer between 1 and "
                         f"{MAX_BUCKETS}, got {num!r}")
    size = options.get("bucket_size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size <= 0):
        raise ValueError(f"torch_tpu: `bucket_size` must be a positive integer (or None for "
                         f"geometric buckets), got {size!r}")
    return num, size


def _round8(v):
    return v if v <= 8 else (v + 7) // 8 * 8


def buckets(lower, upper, num=DEFAULT_BUCKETS, size=None):
    """The bucket sizes of a dimension whose values lie in [lower, upper].

    With `size`: multiples of a step (a multiple of `size`) chosen so that at
    most `num` buckets cover the range, the last one `upper`. Without:
    `upper`, `upper/2`, `upper/4`, ... (`num` of them, rounded up to a
    multiple of 8), so that no size is padded by more than 2x above the
    smallest. Sizes below `lower` are never used."""
    lower = max(1, int(lower))
    upper = max(lower, int(upper))
    if size:
        step = size * max(1, math.ceil(math.ceil(upper / size) / num))
        out = [b for b in range(step, upper, step) if b >= lower] + [upper]
    else:
        out = {upper}
        for k in range(1, num):
            out.add(max(lower, _round8(math.ceil(upper / 2 ** k))))
        out = sorted(out)
    return out


def bucket_of(value, lower, upper, num=DEFAULT_BUCKETS, size=None):
    """The bucket a size `value` runs in (upper None: unbounded)."""
    if upper is None:
        if size:
            return max(size, math.ceil(value / size) * size)
        return max(_OPEN_MIN, 1 << max(0, int(value) - 1).bit_length())
    for b in buckets(lower, upper, num, size):
        if value <= b:
            return b
    return value  # past the declared bound (Dynamo's guards normally recompile first)


def mark_dynamic(tensor, dim, lower=None, upper=None):
    """Declares that dimension(s) `dim` of `tensor` vary between `lower` and
    `upper` (the reference's `torch.tpu.mark_dynamic`). torch.compile traces
    them symbolically (as `torch._dynamo.mark_dynamic(tensor, dim, min=lower,
    max=upper)`), and the tpu backend compiles one program per bucket of the
    range. Returns the tensor. (It stays contiguous: a view into a padded
    storage would give Dynamo a stride that varies with the bucket.)"""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"torch.tpu.mark_dynamic: expected a tensor, got {type(tensor).__name__}")
    dims = [dim] if isinstance(dim, int) else list(dim)
    for d in dims:
        if not isinstance(d, int) or not -tensor.dim() <= d < tensor.dim():
            raise ValueError(f"torch.tpu.mark_dynamic: dim {d!r} is out of range for a tensor "
                             f"of {tensor.dim()} dimensions")
    dims = [d % tensor.dim() for d in dims]
    for name, v in (("lower", lower), ("upper", upper)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            raise ValueError(f"torch.tpu.mark_dynamic: `{name}` must be a non-negative integer, "
                             f"got {v!r}")
    if lower is not None and upper is not None and lower > upper:
        raise ValueError(f"torch.tpu.mark_dynamic: lower ({lower}) is above upper ({upper})")
    for d in dims:
        n = tensor.shape[d]
        if (lower is not None and n < lower) or (upper is not None and n > upper):
            raise ValueError(f"torch.tpu.mark_dynamic: dimension {d} has size {n}, outside "
                             f"[{lower}, {upper}]: widen the bounds")
    # Dynamo specializes sizes 0 and 1 whatever the marks, and a strict mark
    # on one is an error: such a size gets its own (static) graph.
    strict = [d for d in dims if tensor.shape[d] >= 2]
    if strict:
        torch._dynamo.mark_dynamic(tensor, strict, min=lower, max=upper)
    return tensor


# ---- padding ---------------------------------------------------------------------


def _strides(shape):
    out, s = [], 1
    for n in reversed(shape):
        out.append(s)
        s *= max(n, 1)
    return tuple(reversed(out))


_host_pads = [0]


def host_pads():
    """Inputs that had to be padded through the host so far."""
    return _host_pads[0]


def _dense_like(t, shape):
    """Strides of `shape` laid out densely in t's dimension order (by
    stride; size-1 dimensions get stride 1, so that they never make two
    layouts of one bucket differ), or None when t is not laid out so."""
    order = sorted((d for d in range(t.dim()) if shape[d] > 1), key=lambda d: t.stride(d))
    strides, step = [1] * t.dim(), 1
    for d in order:
        strides[d] = step
        step *= shape[d]
    if any(t.stride(d) != strides[d] for d in range(t.dim()) if t.shape[d] > 1):
        return None
    return tuple(strides)


def pad(t, shape):
    """`t` as a tensor of `shape` (each size >= t's) holding t's values at
    the front of each dimension, in one layout per bucket: a view when t
    already is the valid part of such a padded tensor (a bucketed graph's
    result, in whatever dimension order it was laid out), else a copy padded
    on the host (padding values are never read)."""
    shape = tuple(shape)
    strides = _dense_like(t, shape)
    numel = math.prod(shape)
    # The layout (offset, storage size) is part of a capture's key: only a
    # storage holding exactly the padded tensor is taken as it is.
    if (strides is not None and t.storage_offset() == 0
            and t.untyped_storage().nbytes() == numel * t.element_size()):
        return t.as_strided(shape, strides, 0)
    if tuple(t.shape) == shape:  # nothing to pad: a device copy, one program per bucket
        out = t.clone(memory_format=torch.contiguous_format)
        return out.as_strided(shape, _dense_like(out, shape), 0)
    _host_pads[0] += 1
    host = t.cpu()
    out = torch.zeros(shape, dtype=t.dtype)
    out[tuple(slice(0, n) for n in t.shape)] = host
    out = out.to(t.device)
    return out.as_strided(shape, _dense_like(out, shape), 0)


class BucketedRunner:
    """Runs one AOTAutograd graph with symbolic sizes: one capture (one
    program) per bucket, inputs padded to it, results handed back as views of
    their valid part."""

    def __init__(self, gm, name, plan, make_runner, num, size):
        self.name = name
        self.gm = gm  # the graph as traced: what runs when bucketing cannot
        self.failed = None  # why a bucket's capture failed: every call then runs gm eagerly
        self.plan = plan
        self.num, self.size = num, size
        self.runner = make_runner(gm, name)
        self.runner.gm = self._padded_graph
        self.runner.bucket_of_key = self._bucket_label
        self.bounds = {s: plan.bounds(s) for s in plan.symbols}
        self.current = {}

    def _bucket_label(self):
        return ",".join(f"{s}={v}" for s, v in sorted(self.current.items(), key=lambda kv: str(kv[0]))) \
            or "static sizes"

    def _padded_graph(self, *flat):
        plan = self.plan
        n = len(plan.placeholders)
        args, sizes = list(flat[:n]), flat[n:]
        for i, d, k in plan.bounded:
            args[i] = torch.ops.tpu._bounded_dim(args[i], sizes[k], d)
        extra = [sizes[k] for k in plan.value_sizes]
        outs = plan.gm(*args, *extra)
        flat_outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        for j, meta in enumerate(plan.outputs):
            o = flat_outs[j]
            if isinstance(meta, torch.Tensor) and isinstance(o, torch.Tensor):
                for d, s in enumerate(meta.shape):
                    if symbolic(s):
                        o = torch.ops.tpu._static_dim(o, d)
                flat_outs[j] = o
        return flat_outs

    def _eager(self, args):
        out = self.gm(*args)
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def __call__(self, *args):
        plan = self.plan
        # Padded inputs are only right inside one program: a graph that ran
        # its padded form eagerly (a capture that failed, a host tensor too
        # large to be a constant of the program) would compute over the
        # padding, so the traced graph runs instead.
        if self.failed or any(isinstance(a, torch.Tensor) and a.device.type != "tpu"
                              and not self.runner.bakes_in(a) for a in args):
            return self._eager(args)
        actual = plan.values(args)
        bucket = {s: bucket_of(v, *self.bounds[s], self.num, self.size)
                  for s, v in actual.items() if s in plan.symbols}
        self.current = bucket
        padded = []
        for i, p in enumerate(plan.placeholders):
            meta, a = _val(p), args[i]
            if (isinstance(meta, torch.Tensor) and isinstance(a, torch.Tensor)
                    and any(symbolic(s) for s in meta.shape)):
                shape = [int(_expr(s).subs(bucket)) for s in meta.shape]
                padded.append(pad(a, shape))
            elif i in plan.unused:
                padded.append(0)
            elif symbolic(meta):
                padded.append(int(_expr(meta).subs(bucket)))
            else:
                padded.append(a)
        device = next((a.device for a in args
                       if isinstance(a, torch.Tensor) and a.device.type == "tpu"), None)
        sizes = [torch.tensor(int(e.subs(actual)), dtype=torch.int64).to(device)
                 for e in plan.sizes]
        eager_before, captures_before = len(self.runner.eager_keys), self.runner.captures
        try:
            outs = self.runner(*padded, *sizes)
        except RuntimeError as error:
            # A bucket's first call captures and compiles its program: one
            # XLA rejects (its dynamic padder refusing a form this rewrite
            # produced) falls back to the traced graph, never to the caller.
            if self.runner.captures == captures_before:
                raise
            self.failed = f"its bucketed program failed to compile ({error})"
        if self.failed is None and len(self.runner.eager_keys) > eager_before:
            self.failed = "its bucketed capture could not become one program"
        if self.failed:
            warnings.warn(f"torch_tpu: graph {self.name} runs eagerly at each size: "
                          f"{self.failed}", stacklevel=2)
            return self._eager(args)
        result = []
        for meta, o in zip(plan.outputs, outs):
            if isinstance(meta, torch.Tensor) and isinstance(o, torch.Tensor) and any(
                    symbolic(s) for s in meta.shape):
                shape = [int(_expr(s).subs(actual)) for s in meta.shape]
                o = o.as_strided(shape, o.stride(), o.storage_offset())
            elif symbolic(meta):
                o = int(_expr(meta).subs(actual))
            result.append(o)
        return result
