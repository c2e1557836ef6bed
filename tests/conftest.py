"""Test ordering and xdist work units: the longest tests start first, on both workers.

``pyproject.toml`` runs xdist with ``--dist loadgroup --no-loadscope-reorder``: a worker takes the
next work unit from a queue in collection order whenever it is nearly idle. This hook

* makes a work unit of the tests of one module that share a module- or class-scoped fixture
  (an ``xdist_group`` named after the module), so that such a fixture is built on one worker only;
  every other test is a unit of its own;
* orders the units by their expected duration, longest first (``EXPECTED_SECONDS``: seconds on two
  loaded cores, by node-id prefix; a unit's expectation sums the prefixes its tests match), so that the
  longest tests do not end up serialised on one worker at the end of the run. Units without an
  expectation keep their collection order after the others.

Without xdist (``-n 0``) only the order applies.
"""

from __future__ import annotations

import pytest

#: expected seconds of the slow tests, by node-id prefix (the longest matching prefix applies)
EXPECTED_SECONDS = {
    "tests/browser/test_jupyterlab.py::test_notebook01_runs_in_jupyterlab_and_session_panel_steps": 50,
    "tests/test_readme.py::test_readme_calibration_and_recalibration_run": 87,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[02_calibrate_a_bank.ipynb]": 60,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[01_adaptive_evaluation.ipynb]": 50,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[03_trust_audit.ipynb]": 40,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[04_uncertainty.ipynb]": 28,
    "tests/test_audit_replay.py::test_default_banks_are_honest_with_maximum_information_too": 43,
    "tests/test_audit_dask.py": 70,
    "tests/test_calibration_priors.py::test_recalibration_flags_contaminated_items_but_not_stable_ones": 24,
    "tests/test_fuzz_banks.py::test_damaged_bank_files": 22,
    "tests/test_audit_recovery.py::test_parallel_results_do_not_depend_on_the_number_of_workers": 21,
    "tests/test_calibrator_contract.py::test_responses_as_arrays_only_where_declared": 16,
    "tests/test_harness_docs.py": 14,
    "tests/test_real_banks.py::test_evaluate_rejects_answers_keyed_to_another_benchmark": 14,
    "tests/test_psn_calibrator.py::test_recovery_informative_design": 13,
    "tests/test_cbmm.py::test_rank_r_kernels_match_naive": 13,
    "tests/test_engine_cli.py::test_serve_batches_every_op_and_the_help": 11,
    "tests/test_engine_cli.py::test_serve_survives_hostile_input_and_resumes": 11,
}
#: a test marked ``slow`` without an entry above
SLOW_MARK_SECONDS = 5.0
#: fixture scopes whose tests form one work unit per module
SHARED_SCOPES = ("module", "class", "package")


def _expected_seconds(members) -> float:
    """The expectation of a unit: each matching prefix counted once, plus the unmatched slow tests."""
    prefixes, unmatched_slow = set(), 0
    for item in members:
        matches = [prefix for prefix in EXPECTED_SECONDS if item.nodeid.startswith(prefix)]
        if matches:
            prefixes.add(max(matches, key=len))
        elif item.get_closest_marker("slow") is not None:
            unmatched_slow += 1
    return sum(EXPECTED_SECONDS[p] for p in prefixes) + SLOW_MARK_SECONDS * unmatched_slow


def _shares_a_fixture(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope in SHARED_SCOPES for defs in info.name2fixturedefs.values())


def _unit_of(item) -> str:
    module = item.nodeid.split("::", 1)[0]
    return f"{module}::shared-fixtures" if _shares_a_fixture(item) else item.nodeid


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    units: dict[str, list] = {}
    for item in items:
        units.setdefault(_unit_of(item), []).append(item)
    expected = {name: _expected_seconds(members) for name, members in units.items()}
    first_seen = {name: k for k, name in enumerate(units)}
    order = sorted(units, key=lambda name: (-expected[name], first_seen[name]))
    grouped = config.getoption("dist", "no") == "loadgroup"
    items[:] = [item for name in order for item in units[name]]
    if grouped:
        for name in order:
            if len(units[name]) > 1:
                for item in units[name]:
                    item.add_marker(pytest.mark.xdist_group(name))
