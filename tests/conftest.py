"""Test ordering and xdist work units: the longest tests start first, on both workers.

``pyproject.toml`` runs xdist with ``--dist loadgroup --no-loadscope-reorder``: a worker takes the
next work unit from a queue in collection order whenever it is nearly idle. This hook

* makes a work unit of the tests of one module that share a module- or class-scoped fixture
  (an ``xdist_group`` named after the module), so that such a fixture is built on one worker only,
  and of the tests listed in ``SHARED_UNITS`` (a cost shared through the process, not a fixture);
  every other test is a unit of its own;
* orders the units by their expected duration, longest first (``EXPECTED_SECONDS``: CPU seconds,
  by node-id prefix; a unit's expectation sums the prefixes its tests match), so that the
  longest tests do not end up serialised on one worker at the end of the run. Units without an
  expectation keep their collection order after the others.

Without xdist (``-n 0``) only the order applies.

Before an xdist run starts its workers, the controller compiles the library's numba kernels, all
cached on disk (``catengine/numba_cache.py``; ``tests/numba_warmup.py``, one process per worker,
sharing the list), so that the workers and the subprocesses of the tests load them from the cache
instead of each compiling them on a clean clone. With warm caches this costs the loading, about
2 s; ``IRT_NUMBA_WARMUP=0`` skips it.

The workers, and every process a test starts, run BLAS / LAPACK single-threaded
(``OPENBLAS_NUM_THREADS=1`` unless set): two workers already occupy both cores, and OpenBLAS's
own threads on top of them spin against each other (on this 2-core machine, with the other core
busy, ``numpy.linalg.eigh`` of a 158 x 158 matrix took a median 284 ms with two BLAS threads and
4 ms with one).
"""

from __future__ import annotations

import os

for _blas_threads in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_blas_threads, "1")  # inherited by the xdist workers and by test subprocesses

import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

#: expected seconds of the slow tests, by node-id prefix (the longest matching prefix applies): the CPU
#: seconds of the test and its subprocesses, measured on a full run with warm numba caches (wall time on
#: two loaded cores is 1-3x that; only the order matters)
EXPECTED_SECONDS = {
    "tests/browser/test_jupyterlab.py::test_notebook01_runs_in_jupyterlab_and_session_panel_steps": 47,
    "tests/test_readme.py::test_readme_calibration_and_recalibration_run": 41,
    "tests/test_audit_replay.py::test_default_banks_are_honest_with_maximum_information_too": 38,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[01_adaptive_evaluation.ipynb]": 35,
    "tests/test_calibration_priors.py::test_recalibration_flags_contaminated_items_but_not_stable_ones": 28,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[02_calibrate_a_bank.ipynb]": 28,
    "tests/test_harness_docs.py::test_docs_lm_eval_example_runs_offline_as_written": 22,
    "tests/test_recalibrate.py::test_recalibration_runs_the_check_by_default_and_a_skipped_one_is_said_and_made_up": 21,
    "tests/test_scoring_design.py::test_wrong_bank_model_interval_fails_design_interval_covers": 20,
    "tests/test_reliability_contracts.py::test_two_concurrent_recalibrations_keep_one_line_of_descent": 19,
    "tests/test_audit_dask.py::test_cli_scheduler_local_writes_what_the_local_runner_writes": 19,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[04_uncertainty.ipynb]": 19,
    "tests/test_cbmm.py::test_rank_r_kernels_match_naive[1]": 17,
    "tests/test_audit_dask.py::test_bad_scheduler_is_named": 16,
    "tests/test_psn_calibrator.py::test_recovery_informative_design": 15,
    "tests/test_audit_dask.py::test_a_killed_worker_is_survived": 15,
    "tests/test_cbmm.py::test_rank1_kernels_match_naive[37-53]": 14,
    "tests/test_audit_dask.py::test_core_calibration_does_not_import_dask": 14,
    "tests/test_real_banks.py::test_evaluate_rejects_answers_keyed_to_another_benchmark": 14,
    "tests/test_cbmm.py::test_every_sweep_lowers_the_loss[shape3-0.5-2]": 13,
    "tests/test_cbmm.py::test_rank1_kernels_match_naive[300-70]": 13,
    "tests/test_notebooks.py::test_notebook_runs_top_to_bottom[03_trust_audit.ipynb]": 12,
    "tests/test_audit_dask.py::test_replay_audit_on_dask_equals_one_process": 12,
    "tests/test_lart_saem.py::test_saem_agrees_with_quadrature_tight": 12,
    "tests/test_real_banks.py::test_full_rebuild_reproduces_chembench_2pl_with_its_replay_audit": 12,
    "tests/test_audit_replay.py::test_resume_missing_answers_and_report": 11,
    "tests/test_engine_cli.py::test_serve_batches_every_op_and_the_help": 11,
    "tests/test_engine_cli.py::test_serve_survives_hostile_input_and_resumes": 10,
    "tests/test_real_banks.py::test_refitting_reproduces_the_shipped_parameters[math500_lart]": 10,
    "tests/test_readme.py::test_readme_evaluate_your_llm_runs": 10,
    "tests/test_audit_recovery.py::test_parallel_results_do_not_depend_on_the_number_of_workers": 10,
    "tests/test_readme.py::test_readme_notebook_commands_are_valid_jupyter_invocations": 9,
    "tests/test_cli_fit_lineage.py::test_cli_fit_leaves_llms_out_by_ids_or_file": 9,
    "tests/test_fuzz_banks.py::test_damaged_bank_files": 9,
    "tests/test_score_calibration.py::test_the_score_factor_path_stores_a_check_that_restores_coverage": 9,
    "tests/test_audit_replay.py::test_cli_replay": 9,
    "tests/test_harness_docs.py::test_docs_inspect_example_runs_offline_as_written": 8,
    "tests/test_recalibrate.py::test_merge_without_stored_responses_explains_replace": 8,
    "tests/test_readme.py::test_readme_shipped_bank_on_its_source_data": 7,
    "tests/test_psn_calibrator.py::test_recovery_paper_4pl_design": 7,
    "tests/test_engine_cli.py::test_serve_marks_answers_to_items_it_did_not_propose": 7,
    "tests/test_lart_saem.py::test_real_math500": 7,
    "tests/test_real_banks.py::test_refitting_reproduces_the_shipped_parameters[math500_2pl]": 6,
    "tests/test_cli_fit_lineage.py::test_fresh_fit_into_an_existing_bank_directory_is_a_new_lineage_root": 6,
    "tests/test_scoring_doubly_robust.py::test_design_part_unbiased_with_its_variance_under_a_wrong_prediction": 6,
    "tests/test_recalibrate_export.py::test_psn_bank_with_default_export_keeps_it": 6,
    "tests/test_recalibrate_export.py::test_psn_bank_on_the_native_scale_without_features_recalibrates_the_same_way": 6,
    "tests/test_reliability_sessions.py::test_two_serve_processes_on_one_log": 6,
    "tests/test_calibration_priors.py::test_saem_bank_carries_uncertainty_and_small_n_slopes_stay_plausible": 6,
    "tests/test_lart_saem.py::test_recovery_on_the_lart_papers_design": 6,
    "tests/test_calibrator_contract.py::test_refit_from_bank_settings_reproduces_the_bank[saem]": 5,
    "tests/test_scoring_doubly_robust.py::test_beyond_the_population_the_score_is_unbiased_and_never_worse_than_random_items": 5,
    "tests/test_scoring.py::test_session_panel_shows_the_predicted_score": 5,
    "tests/test_scoring_design.py::test_coverage_by_simulation_with_a_wrong_fixed_model": 5,
    "tests/test_lart_saem.py::test_item_bank_export_round_trip": 5,
    "tests/test_widgets.py::test_audit_dashboard_runs_a_tiny_audit": 5,
    "tests/test_real_banks.py::test_demo_runs_against_the_real_math500_bank": 5,
    "tests/test_honest_intervals.py::test_uncertainty_aware_sd_matches_integration_over_item_parameters[4pl]": 5,
    "tests/test_honest_intervals.py::test_uncertainty_aware_sd_matches_integration_over_item_parameters[lart]": 5,
    "tests/test_real_banks.py::test_a_built_package_ships_the_banks_as_package_data": 5,
    "tests/test_real_banks.py::test_catengine_banks_json_lists_the_four_with_their_cards": 5,
    "tests/test_psn_calibrator.py::test_item_bank_export_round_trip": 5,
    "tests/test_audit_report.py::test_cli": 5,
    "tests/test_calibration_priors.py::test_item_covariance_is_the_inverse_hessian_of_the_penalised_objective": 5,
    "tests/test_widgets.py::test_session_panel_ranking_uses_bank_subjects": 5,
    "tests/test_audit_study.py::test_cli_study_runs_resumes_and_reports": 4,
    "tests/test_psn_calibrator.py::test_native_scale_export": 4,
    "tests/test_audit_report.py::test_render_report": 4,
    "tests/test_widgets.py::test_session_panel_answer_buttons_update_display": 4,
    "tests/test_score_calibration.py::test_the_default_path_stores_a_score_check_that_restores_unit_rms_in_sample": 4,
    "tests/test_audit_recovery.py::test_resume_after_interruption_and_deleted_records": 4,
    "tests/test_cbmm.py::test_cli_fit_writes_a_bank": 4,
    "tests/test_scoring_design.py::test_model_variance_floor_recomputes_the_logged_probabilities_and_matches_its_formula": 4,
}
#: tests that share a process-wide cost without a fixture, by node-id prefix -> the work unit they form
#: (one worker then pays the cost once); none at present: every compiled kernel, the parallel cBMM ones
#: included, is loaded from the on-disk cache that the warm-up fills (catengine/numba_cache.py)
SHARED_UNITS: dict[str, str] = {}
#: a test marked ``slow`` without an entry above
SLOW_MARK_SECONDS = 5.0
#: fixture scopes whose tests form one work unit per module
SHARED_SCOPES = ("module", "class", "package")


def _warmup_processes(config) -> int:
    """How many warm-up processes to start: one per xdist worker (at most one per core), none in
    a worker, without xdist, or with ``IRT_NUMBA_WARMUP=0``."""
    if hasattr(config, "workerinput") or os.environ.get("IRT_NUMBA_WARMUP", "1") == "0":
        return 0
    n = config.getoption("numprocesses", None)
    if not n or config.getoption("collectonly", False):
        return 0
    cores = os.cpu_count() or 1
    return min(n if isinstance(n, int) else cores, cores)  # "auto" / "logical": the cores


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook (trylast), which starts the workers
def pytest_sessionstart(session):
    n = _warmup_processes(session.config)
    script = Path(__file__).with_name("numba_warmup.py")
    if n == 0 or not script.exists():
        return
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="numba-warmup-") as claims:
        procs = [subprocess.Popen([sys.executable, str(script), "--claims", claims], cwd=script.parent.parent,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(n)]
        outs = [proc.communicate()[0] for proc in procs]
    lines = [f"numba warm-up ({n} processes, {time.perf_counter() - t0:.1f} s):"]
    for proc, out in zip(procs, outs):
        last = out.strip().splitlines()[-1:] or ["(no output)"]
        lines.append(f"  {last[0]}" if proc.returncode == 0 else f"  failed ({proc.returncode}): {out.strip()[-1000:]}")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for line in lines:
        if reporter is not None:
            reporter.write_line(line)
        else:
            print(line)


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
    for prefix, unit in SHARED_UNITS.items():
        if item.nodeid.startswith(prefix):
            return unit
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
    # xdist's workers (which collect) see --dist as "no" and --dist loadgroup as option "loadgroup"
    grouped = config.getoption("dist", "no") == "loadgroup" or bool(config.getoption("loadgroup", False))
    items[:] = [item for name in order for item in units[name]]
    if grouped:
        for name in order:
            if len(units[name]) > 1:
                for item in units[name]:
                    item.add_marker(pytest.mark.xdist_group(name))


class _GroupSuffix:
    """xdist's loadgroup marks a grouped test by appending ``@group`` to its node id, which its
    scheduler then reads; pytest 9.2 derives ``nodeid`` from a structured id, so xdist 3.8's write
    (to ``item._nodeid``) no longer shows and every test is scheduled on its own
    (pytest-dev/pytest-xdist#1386). This repeats the suffix in the structured id when xdist's is lost."""

    @pytest.hookimpl(trylast=True)  # after xdist's own hook
    def pytest_collection_modifyitems(self, config, items):
        if not config.getoption("loadgroup", False):
            return
        try:
            from _pytest.nodeid import NodeId
        except ImportError:  # a pytest whose nodeid is the string xdist sets
            return
        for item in items:
            wanted = getattr(item, "_nodeid", None)
            if isinstance(wanted, str) and wanted != item.nodeid and wanted.startswith(item.nodeid + "@"):
                item._id = NodeId.parse(wanted)


def pytest_configure(config):
    if hasattr(config, "workerinput"):
        config.pluginmanager.register(_GroupSuffix(), "irt-xdist-group-suffix")
