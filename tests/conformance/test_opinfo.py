"""Every OpInfo sample, run on CPU and on tpu, compared (forward, float32 and complex64
gradients, float32 in-place/out=/non-contiguous variants, and error inputs). One test
per (OpInfo, dtype, kind); known failures are listed in expected_failures.txt and run
as strict xfails."""
import fnmatch
import os

import pytest
import torch

from torch_tpu.tools import conformance
from torch_tpu.tools.opinfo_slice import SLICE, SLICE_ALL_DTYPES

EXPECTED_FAILURES = os.path.join(os.path.dirname(__file__), "expected_failures.txt")


def _selected(config):
    ids = list(conformance.opinfos())
    if not config.getoption("--full"):
        ids = [i for i in ids if i in SLICE]
    globs = config.getoption("--opinfo")
    if globs:
        ids = [i for i in ids if any(fnmatch.fnmatchcase(i, g) for g in globs)]
    return ids


def _cases(config):
    full, ops = config.getoption("--full"), conformance.opinfos()
    for i in _selected(config):
        dtypes = conformance.DTYPES if full or i in SLICE_ALL_DTYPES else ("float32",)
        for dtype, kind in conformance.cases(ops[i], tuple(dtypes)):
            yield i, dtype, kind


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        cases = list(_cases(metafunc.config))
        metafunc.parametrize("case", cases, ids=["-".join(c) for c in cases])


def test_opinfo(case, expected_failures):
    op_name, dtype, kind = case
    if expected_failures.get(case, "").startswith("crash"):
        pytest.xfail(f"not run: {expected_failures[case]}")  # it would kill the session
    outcome = conformance.run_case(conformance.opinfos()[op_name], dtype, kind)
    if outcome.status == "skip":
        pytest.skip(outcome.detail)
    if case in expected_failures:
        if outcome.status == "pass":
            pytest.fail(f"XPASS(strict): {' '.join(case)} now passes; delete its line "
                        f"from {EXPECTED_FAILURES}", pytrace=False)
        pytest.xfail(expected_failures[case])
    if outcome.status == "fail":
        pytest.fail(f"{' '.join(case)}: {outcome.summary()}\n  (a known gap? add "
                    f"'{' '.join(case)} REASON' to {EXPECTED_FAILURES})", pytrace=False)


def test_expected_failures_name_real_cases(expected_failures):
    """Every line of the data file names an existing (OpInfo, dtype, kind) case."""
    ops = conformance.opinfos()
    unknown = [k for k in expected_failures
               if k[0] not in ops or (k[1], k[2]) not in conformance.cases(ops[k[0]])]
    assert not unknown, f"expected_failures.txt names cases that do not exist: {unknown[:10]}"


def test_harness_catches_a_wrong_result(monkeypatch):
    """The comparison can fail: a tpu result off by 1e-2 is caught, and so is
    a NotImplementedError (the CPU fallback stays off)."""
    op = conformance.opinfos()["abs"]
    real = op.op
    monkeypatch.setattr(op, "op", lambda x, *a, **k: real(x) + (1e-2 if x.device.type == "tpu"
                                                                 else 0))
    assert conformance.run_case(op, "float32", "fwd").status == "fail"

    def unlowered(x, *a, **k):
        if x.device.type == "tpu":
            raise NotImplementedError("The operator 'aten::abs' is not implemented for the tpu")
        return real(x)
    monkeypatch.setattr(op, "op", unlowered)
    outcome = conformance.run_case(op, "float32", "fwd")
    assert outcome.status == "fail" and outcome.missing == ("aten::abs",)


def test_variant_kinds_catch_what_they_check(monkeypatch):
    """inplace fails when a write through a strided view lands elsewhere,
    out when the out= tensor is restrided (softmax's resize_ used to), and
    noncontig when a non-contiguous input is read as if contiguous."""
    op = conformance.opinfos()["neg"]
    real_inplace = op.inplace_variant

    def through_a_copy(x, *a, **k):  # writes a contiguous copy on tpu, not the view
        if x.device.type == "tpu" and not x.is_contiguous():
            x.contiguous().neg_()
            return x
        return real_inplace(x, *a, **k)
    monkeypatch.setattr(op, "inplace_variant", through_a_copy)
    assert conformance.run_case(op, "float32", "inplace").status == "fail"

    real = op.op

    def restrides(x, *a, out=None, **k):
        if out is not None and out.device.type == "tpu":
            out.set_(torch.empty_like(out, memory_format=torch.contiguous_format))
        return real(x, *a, out=out, **k) if out is not None else real(x, *a, **k)
    monkeypatch.setattr(op, "op", restrides)
    assert conformance.run_case(op, "float32", "out").status == "fail"

    def as_contiguous(x, *a, **k):
        if x.device.type == "tpu" and not x.is_contiguous():
            x = x.as_strided(x.shape, torch.empty(x.shape).stride())
        return real(x, *a, **k)
    monkeypatch.setattr(op, "op", as_contiguous)
    assert conformance.run_case(op, "float32", "noncontig").status == "fail"
    monkeypatch.setattr(op, "op", real)
    for kind in ("inplace", "out", "noncontig"):
        monkeypatch.setattr(op, "inplace_variant", real_inplace)
        assert conformance.run_case(op, "float32", kind).status == "pass"


def test_whole_storage_copies_keep_conjugate_and_negative_bits():
    """The non-contiguous kind copies each tensor's whole storage: a lazy
    conjugate (or negative) view must stay one, since its storage holds the
    values before the bit (dropping it made complex addmm/baddbmm samples
    with a conjugated operand look wrong)."""
    z = torch.complex(torch.randn(3, 6), torch.randn(3, 6))[:, ::2]
    for view in (z.conj(), z.conj().mT, z.conj().imag):
        moved = conformance._with_storage(view)
        assert moved.is_conj() == view.is_conj() and moved.is_neg() == view.is_neg()
        torch.testing.assert_close(moved.cpu().resolve_conj().resolve_neg(),
                                   view.resolve_conj().resolve_neg(), rtol=0, atol=0)


def test_errors_kind_fails_when_tpu_takes_what_cpu_rejects(monkeypatch):
    """The errors kind: a tpu call that returns where CPU raises fails it;
    error inputs CPU itself takes are skipped, not counted."""
    op = conformance.opinfos()["masked_scatter"]
    assert conformance.run_case(op, "float32", "errors").status == "pass"
    real = op.op

    def lenient(x, *a, **k):
        return x.clone() if x.device.type == "tpu" else real(x, *a, **k)
    monkeypatch.setattr(op, "op", lenient)
    outcome = conformance.run_case(op, "float32", "errors")
    assert outcome.status == "fail" and "no error where CPU raises" in outcome.detail
