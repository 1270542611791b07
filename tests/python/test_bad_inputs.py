"""Bad inputs raise on tpu what they raise on CPU, with a clear message, and
the inputs next to them return what CPU returns, in every eager mode.

The cases are in bad_input_cases.py; the run ends with counts per outcome.
"""
import functools

import pytest

import bad_input_cases as cases


# Mismatches not fixed yet, one reason per line.
KNOWN = {
    # Overlaps CPU cannot classify (not dense): its result depends on its loop order.
    "overlap:column_mul_": "CPU's result depends on its loop order; tpu reads before writing",
    "overlap:masked_scatter__self": "CPU's result depends on its loop order; tpu reads before writing",
    "overlap:unfold_add_": "CPU adds once per aliasing position; tpu writes each element once",
    "overlap:mm_out_is_input": "CPU's mm reads the out= it is writing (zeros); tpu returns the product",
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
