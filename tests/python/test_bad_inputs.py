"""Bad inputs raise on tpu what they raise on CPU, with a clear message, and
the inputs next to them return what CPU returns, in every eager mode.

The cases are in bad_input_cases.py; the run ends with counts per outcome.
"""
import functools

import pytest

import bad_input_cases as cases

# Out-of-range index values are checked on device data by separate work.
DEVICE_INDEX_CHECKS = "device index checks"

# Mismatches not fixed yet, one reason per line.
KNOWN = {
}


@functools.lru_cache(maxsize=None)
def isolated(case_id):
    return cases.outcome_isolated(cases.by_id()[case_id])


def _params():
    for case in cases.CASES:
        for mode in cases.MODES:
            marks = []
            if case.id in KNOWN:
                marks.append(pytest.mark.xfail(reason=KNOWN[case.id], strict=False))
            yield pytest.param(case, mode, id=f"{case.id}-{mode}", marks=marks)


@pytest.mark.parametrize("case,mode", list(_params()))
def test_bad_input(case, mode, request):
    result, detail = isolated(case.id)[mode] if case.isolate else cases.outcome(case, mode)
    counts = request.config.stash.setdefault(cases.COUNTS_KEY, {})
    counts[result] = counts.get(result, 0) + 1
    assert result != "mismatch", detail
