"""The coverage report's counting rules (torch_tpu.tools.coverage)."""
from torch_tpu.tools.coverage import _base, registrations


def test_an_operator_counts_once_whatever_its_overloads():
    assert _base("aten::add.Tensor") == "add"
    assert _base("aten::add.out") == "add"
    assert _base("aten::add_.Tensor") == "add"           # in-place comes with it
    assert _base("aten::_foreach_mul_.Scalar") == "_foreach_mul"
    assert _base("aten::__lshift__.Scalar") == "__lshift__"  # a dunder is not in-place
    assert _base("aten::_to_copy") == "_to_copy"


def test_registrations_count_distinct_native_operators():
    overloads, native = registrations()
    assert "aten::add.Tensor" in overloads
    assert {"add", "mm", "_foreach_mul", "nonzero"} <= native
    assert not any(n.endswith("_") and not n.endswith("__") for n in native)
    assert len(native) >= 450   # the target, in-place and out= folded
