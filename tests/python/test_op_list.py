"""The one op list (torch_tpu._C._op_list(), built by csrc/aten/op_list.cc from
the registrations): complete, classified, and what docs/ops.md and the
coverage report show."""
import os

import torch
import torch_tpu

from torch_tpu.tools import coverage, ops_doc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROWS = coverage.op_list()
BY_OP = {(r["op"], r["key"]): r for r in ROWS}


def row(op, key="PrivateUse1"):
    return BY_OP[(op, key)]


def test_every_privateuse1_kernel_is_listed_once():
    # Read together: importing torch.distributed.fsdp (another test may have)
    # registers its ops for every backend.
    rows = coverage.op_list()
    registered = set(torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1"))
    listed = [r["op"] for r in rows if r["key"] == "PrivateUse1" and r["kind"] != "fallback"]
    assert len(listed) == len(set(listed))
    assert set(listed) == registered
    assert not [r for r in rows if r["kind"] == "unlisted"]
    assert [r["op"] for r in rows if r["kind"] == "fallback"] == ["*"]


def test_kinds_and_families():
    assert row("aten::add.Tensor")["kind"] == "lowered"
    assert row("aten::add.Tensor")["family"] == "elementwise"
    for variant in ("aten::add_.Tensor", "aten::add.out"):
        assert row(variant)["kind"] == "derived"
        assert row(variant)["lowering"] == "aten::add.Tensor"
        assert row(variant)["family"] == "elementwise"
    for op in ("aten::nonzero", "aten::equal", "aten::bincount", "aten::masked_select"):
        assert (row(op)["kind"], row(op)["family"]) == ("host-synced", "host_ops"), op
    for op in ("aten::_unique2", "aten::unique_dim", "aten::unique_consecutive.out"):
        assert (row(op)["kind"], row(op)["family"]) == ("host-synced", "unique_ops"), op
    for op in ("aten::view", "aten::view_as_real", "aten::view_as_complex", "aten::empty_strided"):
        assert (row(op)["kind"], row(op)["family"]) == ("core", "core_ops"), op
    assert row("aten::_masked_softmax")["kind"] == "composite"
    assert row("aten::to_padded_tensor", "NestedTensorPrivateUse1")["family"] == "nested_ops"
    assert row("c10d::allreduce_")["kind"] == "collective"


def test_families_name_the_lowering_files():
    assert row("aten::complex")["family"] == "pointwise_extra"
    assert row("aten::polar")["family"] == "pointwise_extra"
    assert row("aten::hash_tensor")["family"] == "reduction"
    assert row("aten::logcumsumexp")["family"] == "reduction_scan"
    assert row("aten::linalg_lstsq")["family"] == "linalg_lstsq"
    assert row("aten::_ctc_loss")["family"] == "nn_ctc"
    for r in ROWS:
        if r["kind"] in ("lowered", "derived"):
            assert os.path.exists(os.path.join(ROOT, "csrc", "lowering", r["family"] + ".cc")), r
        elif r["kind"] in ("host-synced", "core", "composite"):
            assert os.path.exists(os.path.join(ROOT, "csrc", "aten", r["family"] + ".cc")), r


def test_lowered_rows_are_registry_entries_and_derived_rows_name_one():
    registry = set(torch_tpu._C._lowered_ops())
    lowered = {r["op"] for r in ROWS if r["kind"] == "lowered"}
    assert lowered <= registry
    assert all(r["lowering"] == r["op"] for r in ROWS if r["kind"] == "lowered")
    assert all(r["lowering"] in lowered for r in ROWS if r["kind"] == "derived")
    served = {r["op"] for r in ROWS if r["kind"] in ("lowered", "derived")}
    assert served == set(torch_tpu.native_ops())


def test_fsdp_ops_are_pytorchs_and_left_out_of_the_page():
    import torch.distributed.fsdp  # noqa: F401  registers fsdp:: ops for every backend
    rows = coverage.op_list()
    fsdp = [r for r in rows if r["op"].startswith("fsdp::")]
    assert fsdp and all((r["kind"], r["family"]) == ("pytorch", "fsdp") for r in fsdp)
    assert "fsdp::" not in ops_doc.render(rows)


def test_coverage_counts_come_from_the_op_list():
    rows = coverage.op_list()
    overloads, native = coverage.registrations(rows)
    # StableHLO kernels other tests made; other packages' ops (TorchRec's)
    theirs = {r["op"] for r in rows if r["kind"] in ("user", "external")}
    assert overloads == set(torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")) - theirs
    # The operators the hand-kept lists had missed are counted.
    assert {"equal", "bincount", "_unique", "_unique2", "unique_dim", "unique_consecutive",
            "unique_dim_consecutive"} <= native
    assert not {"view_as_real", "view", "_masked_softmax"} & native  # core, composite


def test_docs_ops_md_is_current():
    with open(os.path.join(ROOT, "docs", "ops.md")) as f:
        text = f.read()
    assert text == ops_doc.render(ROWS), \
        "docs/ops.md is stale: run python -m torch_tpu.tools.ops_doc"


def test_other_packages_ops_are_listed_as_external():
    """A package that registers its own namespace's ops for tpu (TorchRec's
    embedding ops, through jax_op) is listed apart, not as ours."""
    torch.library.define("tt_external::double", "(Tensor x) -> Tensor")
    torch.library.impl("tt_external::double", "PrivateUse1")(lambda x: x * 2)
    rows = [r for r in coverage.op_list() if r["op"].startswith("tt_external::")]
    assert [(r["op"], r["kind"], r["family"]) for r in rows] == [
        ("tt_external::double", "external", "tt_external")]
    assert "tt_external::double" not in coverage.registrations()[0]
