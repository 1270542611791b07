"""OpInfo conformance: PyTorch's own OpInfo samples, run on CPU and on tpu, compared.

One *case* is (OpInfo, dtype, kind) where kind is "fwd" (outputs), "bwd"
(float32 and complex64 input gradients under a fixed random cotangent; complex
outputs count, so a real op's complex results are differentiated too), or, in
float32, one
of the variants a backend gets wrong silently: "inplace" (the in-place
variant's written input, directly and through a transposed view of a larger
tensor), "out" (the out= form, into empty tensors the call resizes and into
strided views of the right size) and "noncontig" (outputs from PyTorch's
non-contiguous copies of each sample's tensors). A case runs every
sample the OpInfo generates on CPU; its outcome is "pass" when every sample
whose CPU run succeeds also matches on tpu, "fail" otherwise, and "skip" when
there is nothing to compare (no samples, or PyTorch itself marks the op as not
comparable across devices). The pytest suite in tests/conformance and the
report `python -m torch_tpu.tools.coverage` both run cases through `run_case`.
"""
import dataclasses
import re
import sys
import types
import unittest

import torch

import torch_tpu

DTYPES = {
    "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
    "int64": torch.int64, "int32": torch.int32, "bool": torch.bool,
    "complex64": torch.complex64,
}
# (atol, rtol): torch.testing defaults, scaled up modestly (one compiler's
# transcendental approximations against another's).
TOLERANCES = {
    torch.float32: (1e-4, 1e-5),
    torch.bfloat16: (1.6e-2, 1.6e-2),
    torch.float16: (1e-3, 1e-3),
}
BACKWARD_TOLERANCE = (1e-4, 1e-4)
HIGHEST = 2  # torch_tpu._C precision override: f32 matmuls at HIGHEST


def _install_expecttest_shim():
    """torch.testing._internal imports `expecttest` only for its TestCase base
    class; a stand-in keeps this harness free of that test-only dependency."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        shim = types.ModuleType("expecttest")
        shim.ACCEPT = False
        shim.TestCase = unittest.TestCase
        sys.modules["expecttest"] = shim


def _databases():
    _install_expecttest_shim()
    from torch.testing._internal import common_methods_invocations as cmi
    dbs = [cmi.op_db]
    for name in ("foreach_unary_op_db", "foreach_binary_op_db", "foreach_pointwise_op_db",
                 "foreach_reduce_op_db", "foreach_other_op_db"):
        dbs.append(getattr(cmi, name, []))
    return dbs


def op_id(op):
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


_OPINFOS = None


def opinfos():
    """Every OpInfo by id ("name" or "name.variant"), in database order."""
    global _OPINFOS
    if _OPINFOS is None:
        _OPINFOS = {}
        for db in _databases():
            for op in db:
                _OPINFOS.setdefault(op_id(op), op)
    return _OPINFOS


KINDS = ("fwd", "bwd", "inplace", "out", "noncontig", "errors")


def cases(op, dtypes=tuple(DTYPES)):
    """The (dtype name, kind) cases an OpInfo has among `dtypes`."""
    supported = op.supported_dtypes("cpu")
    out = [(d, "fwd") for d in dtypes if DTYPES[d] in supported]
    if ("complex64" in dtypes and torch.complex64 in supported and op.supports_autograd
            and torch.complex64 in op.supported_backward_dtypes("cpu")):
        out.append(("complex64", "bwd"))
    if "float32" not in dtypes or torch.float32 not in supported:
        return out
    if op.supports_autograd and torch.float32 in op.supported_backward_dtypes("cpu"):
        out.append(("float32", "bwd"))
    if op.inplace_variant is not None:
        out.append(("float32", "inplace"))
    if op.supports_out:
        out.append(("float32", "out"))
    out.append(("float32", "noncontig"))
    if op.error_inputs_func is not None:  # inputs of their own dtypes, listed under float32
        out.append(("float32", "errors"))
    return out


@dataclasses.dataclass
class Outcome:
    status: str                      # "pass", "fail" or "skip"
    detail: str = ""                 # first failure (or the skip reason)
    missing: tuple = ()              # ATen ops that raised NotImplementedError
    passed: int = 0                  # samples that matched
    failed: int = 0                  # samples that did not

    def summary(self):
        if self.status != "fail":
            return self.detail
        head = f"{self.failed}/{self.failed + self.passed} samples fail"
        if self.missing:
            return f"{head}; missing {', '.join(self.missing)}"
        return f"{head}; {self.detail}"


def upstream_skip(op, dtype):
    """PyTorch's own reason why this op's output is not comparable across
    devices (its test_compare_cpu skip), or None."""
    for info in list(op.decorators) + list(getattr(op, "skips", ())):
        if not hasattr(info, "is_active") or info.test_name != "test_compare_cpu":
            continue
        if not info.is_active("TestCommon", "test_compare_cpu", info.device_type, dtype, {}):
            continue
        for dec in info.decorators:
            if info.device_type == "cuda" and dec is unittest.expectedFailure:
                # Known to differ from CPU on an accelerator (random numbers).
                return "upstream: differs from CPU on cuda (expected failure there)"
            if info.device_type is not None:
                continue
            wrapped = dec(lambda: None)
            if getattr(wrapped, "__unittest_skip__", False):
                return "upstream: " + (wrapped.__unittest_skip_why__ or "not comparable")
    return None


_MISSING = re.compile(r"operator '([\w:.]+)' is not implemented for the tpu"
                      r"|tpu: (aten::[\w.]+) is not supported for these arguments"
                      r"|Could not run '([\w:.]+)' with arguments from the '(\w+)' backend")


def missing_op(error):
    """The ATen op a NotImplementedError names, or None: 'aten::op.overload',
    'aten::op (these arguments)' when the lowering rejects the arguments, or
    'aten::op (SparseCsrtpu)' when a dispatch key other than tpu has no kernel."""
    m = _MISSING.search(str(error))
    if not m:
        return None
    if m.group(1):
        name = m.group(1)
    elif m.group(2):
        name = m.group(2) + " (these arguments)"
    else:
        name = f"{m.group(3)} ({m.group(4)})"
    return name if "::" in name else "aten::" + name


def _first_line(error):
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


def _with_storage(t, device="tpu", copies=None):
    """t on `device` as a view of a copy of its whole storage (same sizes,
    strides and storage offset): for ops that address the storage (as_strided).
    With `copies` (a dict), tensors sharing a storage share its one copy."""
    copies = {} if copies is None else copies
    key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes(), t.dtype)
    if key not in copies:
        flat = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage())
        copies[key] = flat.to(device, copy=True)
    view = copies[key].as_strided(t.size(), t.stride(), t.storage_offset())
    # The storage holds what a conjugate or negative view's bit transforms.
    if t.is_conj():
        view = view.conj()
    if t.is_neg():
        view = view._neg_view()
    return view


class _ToTpu:
    """Copies a sample to tpu; tensors that appear twice stay one tensor.
    With `shared_storage`, tensors that share a CPU storage (views of one
    tensor, an expanded tensor) share one tpu storage, laid out alike."""

    def __init__(self, grad, whole_storage=False, shared_storage=False):
        self.grad, self.whole_storage, self.memo = grad, whole_storage, {}
        self.shared, self.storages = shared_storage, {}

    def __call__(self, t):
        if not isinstance(t, torch.Tensor) or (self.shared and t.device.type == "meta"):
            return t  # (an error input's meta tensor stays one)
        if id(t) not in self.memo:
            if self.shared and t.layout == torch.strided and t.untyped_storage().nbytes() > 0:
                copy = _with_storage(t.detach(), copies=self.storages)
            else:
                copy = _with_storage(t.detach()) if self.whole_storage else t.detach().to("tpu")
            if self.grad and t.requires_grad:
                copy.requires_grad_(True)
            self.memo[id(t)] = copy
        return self.memo[id(t)]


# Arguments PyTorch requires on the CPU whatever the device (OpInfo samples
# create them without a device): op id -> positions in sample.args.
HOST_ARGS = {"tensor_split": (0,)}


def _is_cpu(v):
    return isinstance(v, (str, torch.device)) and str(v) == "cpu"


def _on_tpu(sample, grad, op_name=None, keep_layout=False, shared_storage=False):
    """The sample on tpu: tensors copied (contiguous, unless `keep_layout` or
    the op addresses storage: then with their strides and storage offset;
    with `shared_storage`, tensors sharing a storage keep sharing one)."""
    host = HOST_ARGS.get(op_name, ())
    kept = {i: a for i, a in enumerate(sample.args) if i in host}
    whole = keep_layout or (op_name or "").startswith("as_strided")
    moved = sample.transform(_ToTpu(grad, whole, shared_storage))
    # A device named in the sample (to("cpu"), factories) becomes tpu.
    moved.args = tuple(kept.get(i, "tpu" if _is_cpu(a) else a) for i, a in enumerate(moved.args))
    if _is_cpu(moved.kwargs.get("device")):
        moved.kwargs["device"] = "tpu"
    return moved


def _flat(x):
    """Outputs as a flat list (tensors, numbers, None), structure dropped."""
    if isinstance(x, (list, tuple)):
        return [v for item in x for v in _flat(item)]
    return [x]


def _to_cpu(outputs):
    """tpu outputs on CPU for comparison; raises if one stayed off tpu."""
    flat = []
    for v in _flat(outputs):
        if isinstance(v, torch.Tensor):
            if v.device.type != "tpu":
                raise AssertionError(f"an output is on {v.device}, not on tpu")
            v = v.cpu()
        flat.append(v)
    return flat


def _tolerance(value):
    """(atol, rtol) by the dtype of the reference output (not of the inputs:
    cos of an int64 tensor is a float32 tensor)."""
    if isinstance(value, torch.Tensor):
        if value.dtype in TOLERANCES:
            return TOLERANCES[value.dtype]
        if value.is_floating_point() or value.is_complex():
            return TOLERANCES[torch.float32]
        return 0, 0
    return (TOLERANCES[torch.float32] if isinstance(value, float) else (0, 0))


def _compare(actual, expected):
    expected = _flat(expected)
    if len(actual) != len(expected):
        raise AssertionError(f"{len(actual)} outputs on tpu, {len(expected)} on CPU")
    for i, (a, e) in enumerate(zip(actual, expected)):
        atol, rtol = _tolerance(e)
        try:
            torch.testing.assert_close(a, e, atol=atol, rtol=rtol, equal_nan=True)
        except AssertionError as error:
            raise AssertionError(f"output {i}: {_mismatch(error)}") from None


def _mismatch(error):
    """The informative lines of an assert_close message, on one line."""
    lines = [l.strip() for l in str(error).splitlines() if l.strip()]
    keep = [l for l in lines if l.startswith(("Mismatched", "Greatest absolute"))]
    return "; ".join([lines[0].rstrip("!")] + keep) if lines else "mismatch"


def _call(op, sample):
    return sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))


def _call_tpu(op, sample):
    """Runs on tpu; factories without a device argument allocate there too."""
    with torch.device("tpu"):
        return _call(op, sample)


# OpInfos whose index output PyTorch leaves unspecified among equal values
# (sort and argsort unless stable=True, topk, kthvalue, mode): CPU's
# introsort, quickselect and mode scan order ties arbitrarily, so indices are
# compared by the input values they select. id: (index output, position of
# dim in args, position of keepdim in args or None).
TIED_INDICES = {"sort": (1, 0, None), "argsort": (0, 0, None), "topk": (1, 1, None),
                "kthvalue": (1, 1, 2), "mode": (1, 0, 1)}


def _arg(sample, position, name, default):
    if position is not None and len(sample.args) > position:
        return sample.args[position]
    return sample.kwargs.get(name, default)


def _selected(sample, spec, indices):
    """The values of sample.input that `indices` (an index output) select."""
    x, (_, dim_at, keepdim_at) = sample.input, spec
    dim = _arg(sample, dim_at, "dim", -1)
    keepdim = keepdim_at is None or _arg(sample, keepdim_at, "keepdim", False)
    if x.dim() == 0:
        return x.clone()
    if not keepdim:
        indices = indices.unsqueeze(dim)
    return x.gather(dim, indices)


def _without_tie_order(op, sample, actual, expected):
    """actual and expected with an unspecified-order index output replaced by
    the values it selects (see TIED_INDICES)."""
    spec = TIED_INDICES.get(op_id(op))
    if spec is None or sample.kwargs.get("stable") is True:
        return actual, expected
    expected = _flat(expected)
    for outputs in (actual, expected):
        outputs[spec[0]] = _selected(sample, spec, outputs[spec[0]])
    return actual, expected


def _forward_sample(op, sample, keep_layout=False):
    tpu = _on_tpu(sample, False, op_id(op), keep_layout)
    try:
        expected = _call(op, sample)
    except Exception:
        return None  # the reference rejects this sample: nothing to compare
    _compare(*_without_tie_order(op, sample, _to_cpu(_call_tpu(op, tpu)), expected))
    return True


def _copy(x):
    """x with every tensor cloned (lists kept: the _foreach ops' inputs)."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    return type(x)(_copy(v) for v in x) if isinstance(x, (list, tuple)) else x


def _strided_like(t, device=None):
    """A non-contiguous tensor equal to `t`: its dims reversed over a larger,
    zero-filled base with one more row in every dim. Returns (view, base)."""
    shape = list(reversed(t.shape))
    base = torch.zeros([n + 1 for n in shape], dtype=t.dtype, device=device or t.device)
    view = base[tuple(slice(0, n) for n in shape)].permute(*reversed(range(t.dim())))
    view.copy_(t.detach())
    return view, base


def _inplace_sample(op, sample):
    if sample.broadcasts_input:
        return None  # the input cannot take the result's shape (PyTorch skips these too)
    f = op.inplace_variant
    expected = (_with_storage(sample.input, "cpu") if op_id(op).startswith("as_strided")
                else _copy(sample.input))
    try:
        f(expected, *sample.args, **sample.kwargs)
    except Exception:
        return None
    tpu = _on_tpu(sample, False, op_id(op))
    returned = f(tpu.input, *tpu.args, **tpu.kwargs)
    if isinstance(tpu.input, torch.Tensor) and returned is not tpu.input:
        raise AssertionError("the in-place variant returned a new tensor, not its input")
    _compare(_to_cpu(tpu.input), expected)
    if isinstance(sample.input, torch.Tensor) and sample.input.dim() >= 2:
        # Through a view: the written elements land in the base, the rest stay 0.
        view, base = _strided_like(sample.input)
        tpu_view, tpu_base = _strided_like(sample.input, "tpu")
        try:
            f(view, *sample.args, **sample.kwargs)
        except Exception:
            return True
        f(tpu_view, *tpu.args, **tpu.kwargs)
        try:
            _compare(_to_cpu(tpu_base), base)
        except AssertionError as error:
            raise AssertionError(f"through a strided view: {error}") from None
    return True


def _empty_outs(results, device, strided):
    """out= tensors for `results` (a tensor or a tuple of them): empty, or
    (strided) non-contiguous views of the right size."""
    def one(r):
        if strided and r.dim() >= 2:
            return _strided_like(torch.zeros_like(r), device)[0]
        return torch.empty(0, dtype=r.dtype, device=device)
    return one(results) if isinstance(results, torch.Tensor) else tuple(one(r) for r in results)


def _out_sample(op, sample):
    try:
        results = op(sample.input, *sample.args, **sample.kwargs)
    except Exception:
        return None
    if not (isinstance(results, torch.Tensor) or (
            isinstance(results, (tuple, list)) and results
            and all(isinstance(r, torch.Tensor) for r in results))):
        return None
    tpu = _on_tpu(sample, False, op_id(op))
    expected = sample.output_process_fn_grad(results)
    for strided in (False, True):
        # CPU's out= call gives the layout out= tensors end up with; the
        # values must equal the functional result or CPU's out= one (CPU's
        # gelu and tril leave some strided out= tensors unwritten, its
        # ihfftn writes them differently from its functional form).
        cpu_outs = _empty_outs(results, "cpu", strided)
        try:
            op(sample.input, *sample.args, **sample.kwargs, out=cpu_outs)
        except Exception:
            continue
        if [o.shape for o in _flat(cpu_outs)] != [r.shape for r in _flat(results)]:
            continue  # CPU's out= form leaves this sample's out= tensors unwritten (ihfftn)
        actual = _empty_outs(results, "tpu", strided)
        op(tpu.input, *tpu.args, **tpu.kwargs, out=actual)
        got = _to_cpu(sample.output_process_fn_grad(actual))
        try:
            _compare(*_without_tie_order(op, sample, list(got), expected))
        except AssertionError as error:
            try:  # CPU's own out= result, where it differs from its functional one
                _compare(*_without_tie_order(op, sample, got,
                                             sample.output_process_fn_grad(cpu_outs)))
            except AssertionError:
                raise AssertionError(f"{'strided' if strided else 'empty'} out=: {error}") from None
        for i, (a, e) in enumerate(zip(_flat(actual), _flat(cpu_outs))):
            if a.stride() != e.stride():
                raise AssertionError(f"strides only: out {i} has {a.stride()}, CPU's {e.stride()}")
    return True


def _noncontig_sample(op, sample):
    return _forward_sample(op, sample.noncontiguous(), keep_layout=True)


def _grad_targets(outputs):
    return [o for o in _flat(outputs) if isinstance(o, torch.Tensor) and o.requires_grad
            and (o.is_floating_point() or o.is_complex())]


def _leaves(sample):
    found = []
    for v in _flat([sample.input, list(sample.args), list(sample.kwargs.values())]):
        if isinstance(v, torch.Tensor) and v.requires_grad and all(v is not f for f in found):
            found.append(v)
    return found


def _grads(outputs, inputs, cotangents):
    grads = torch.autograd.grad(outputs, inputs, cotangents, allow_unused=True)
    return [g.cpu() if g is not None else None for g in grads]


def _backward_sample(op, sample, index):
    tpu = _on_tpu(sample, True, op_id(op))
    try:
        expected = _call(op, sample)
    except Exception:
        return None
    outs, inputs = _grad_targets(expected), _leaves(sample)
    if not outs or not inputs:
        return None  # nothing differentiable in this sample
    gen = torch.Generator().manual_seed(1000 + index)
    cot = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
    try:
        want = _grads(outs, inputs, cot)
    except Exception:
        return None  # PyTorch's own CPU backward fails: nothing to compare
    actual = _call_tpu(op, tpu)
    got = _grads(_grad_targets(actual), _leaves(tpu), [c.to("tpu") for c in cot])
    for i, (g, w) in enumerate(zip(got, want)):
        try:
            torch.testing.assert_close(g, w, atol=BACKWARD_TOLERANCE[0],
                                       rtol=BACKWARD_TOLERANCE[1], equal_nan=True)
        except AssertionError as error:
            raise AssertionError(f"grad of input {i}: {_mismatch(error)}") from None
    return True


def _samples(op, dtype, grad):
    torch.manual_seed(0)
    return list(op.sample_inputs("cpu", dtype, requires_grad=grad))


def _error_sample(op, error_input):
    """An input CPU rejects (OpInfo's error_inputs): tpu raises an exception
    of the same type (the message may differ: a device-side check words its
    own), and the process goes on. Aliasing between the sample's tensors is
    kept (out= into an input, expanded out= tensors)."""
    want, sample = error_input.error_type, error_input.sample_input
    tpu = _on_tpu(sample, False, op_id(op), shared_storage=True)
    try:
        op(sample.input, *sample.args, **sample.kwargs)
        return None  # CPU takes it (an error input meant for another device)
    except want:
        pass
    try:
        _to_cpu(op(tpu.input, *tpu.args, **tpu.kwargs))
        torch.tpu.synchronize()
    except want:
        return True
    except Exception as error:  # noqa: BLE001 — reported below
        raise AssertionError(f"raised {_first_line(error)} where CPU raises {want.__name__} "
                             f"({error_input.error_regex!r})") from None
    raise AssertionError(f"no error where CPU raises {want.__name__} ({error_input.error_regex!r})")


_SAMPLE_RUNNERS = {"fwd": _forward_sample, "inplace": _inplace_sample, "out": _out_sample,
                   "noncontig": _noncontig_sample, "errors": _error_sample}


def _run_samples(op, dtype, kind):
    outcome, missing = Outcome("pass"), []
    samples = list(op.error_inputs("cpu")) if kind == "errors" else _samples(op, dtype, kind == "bwd")
    for i, sample in enumerate(samples):
        try:
            ok = (_backward_sample(op, sample, i) if kind == "bwd"
                  else _SAMPLE_RUNNERS[kind](op, sample))
        except Exception as error:  # noqa: BLE001 — every failure is recorded
            outcome.failed += 1
            name = missing_op(error) if isinstance(error, NotImplementedError) else None
            if name and name not in missing:
                missing.append(name)
            if not outcome.detail:
                outcome.detail = f"sample {i}: {_first_line(error)}"
            continue
        outcome.passed += ok is True
    outcome.missing = tuple(missing)
    if outcome.failed:
        outcome.status = "fail"
    elif not outcome.passed:
        outcome.status, outcome.detail = "skip", "no comparable samples"
    return outcome


def run_case(op, dtype_name, kind):
    """Runs one case with the CPU fallback off; returns its Outcome."""
    dtype = DTYPES[dtype_name]
    reason = upstream_skip(op, dtype)
    if reason:
        return Outcome("skip", reason)
    torch_tpu.set_cpu_fallback(False)
    previous = torch_tpu._C._get_precision_override()
    # f32 contractions at full precision, wherever they occur: in f32 and
    # integer cases, and in 16-bit ones with f32 parts (cov's aweights); the
    # override leaves 16-bit operands alone, and DEFAULT precision is tested
    # on its own (tests/python/test_precision.py).
    torch_tpu._C._set_precision(HIGHEST)
    try:
        return _run_samples(op, dtype, kind)
    except Exception as error:  # noqa: BLE001 — sample generation itself failed
        return Outcome("fail", f"sample generation: {_first_line(error)}")
    finally:
        torch_tpu._C._set_precision(previous)


# -- expected failures -------------------------------------------------------

def read_expected(path):
    """{(op id, dtype, kind): reason} from the expected-failures file."""
    expected = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 3)
            if len(parts) < 3 or parts[1] not in DTYPES or parts[2] not in KINDS:
                raise ValueError(f"{path}:{number}: expected 'OP DTYPE {'|'.join(KINDS)} "
                                 f"REASON': {line}")
            expected[(parts[0], parts[1], parts[2])] = parts[3] if len(parts) > 3 else ""
    return expected


def format_expected(failures):
    """Expected-failures file text from {(op id, dtype, kind): reason}."""
    lines = [
        "# OpInfo conformance cases expected to fail on tpu (tests/conformance).",
        f"# One line per case: OPINFO DTYPE {'|'.join(KINDS)} REASON.",
        "# A listed case that passes fails the suite (strict xpass): delete its line.",
        "# Regenerate after a full sweep with:",
        "#   python -m torch_tpu.tools.coverage --write-expected PATH",
    ]
    width = max((len(k[0]) for k in failures), default=10)
    for (name, dtype, kind), reason in sorted(failures.items()):
        lines.append(f"{name:<{width}} {dtype:<8} {kind} {reason}")
    return "\n".join(lines) + "\n"


def short_reason(outcome):
    """A one-line reason for the expected-failures file."""
    if outcome.missing:
        return "missing " + ", ".join(outcome.missing[:3])
    return outcome.detail.split(": ", 1)[-1][:160] if outcome.detail else "fails"
