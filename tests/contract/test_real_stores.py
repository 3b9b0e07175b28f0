"""PolyLoop's own stores and seams pass the kit, run from contract-suite/ as CI runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contract._runner import REPO, Result, run_contract
from tests.stores._postgres import admin

#: Each test here runs pytest in a subprocess.
pytestmark = [pytest.mark.slow, pytest.mark.server]


#: The rules that need a second store object on the same storage.
NEEDS_REOPEN = (
    "run_store::test_prefix_durability_across_reopen",
    "run_store::test_appends_continue_after_reopen",
    "run_store::test_two_store_objects_keep_each_others_writes",
    "run_store::test_a_write_is_seen_at_once_through_another_store_object",
    "run_store::test_racing_starts_across_store_objects_have_one_winner",
    "run_store_leases::test_a_held_lease_is_refused_to_a_second_store_object",
    "run_store_leases::test_a_lease_is_free_again_after_its_store_is_closed",
    "run_store_leases::test_a_lease_is_free_within_a_second_after_its_holder_is_killed",
    "run_store_user_asking::test_asks_and_answers_read_back_in_write_order",
    "run_store_user_asking::test_a_second_decision_for_one_ask_is_refused",
    "run_store_user_asking::test_two_deciders_at_once_one_wins",
    "run_store_record_batching::test_batched_records_read_back_as_written_one_by_one",
    "run_store_record_batching::test_a_refused_record_stores_none_of_its_batch",
    "run_store_record_batching::test_a_cut_short_batch_leaves_a_prefix",
    "run_store_record_batching::test_asks_and_answers_in_a_batch_keep_their_rules",
)

#: Every rule of the batching suite (design 0055).
BATCHING_RULES = (
    "test_batched_records_read_back_as_written_one_by_one",
    "test_a_refused_record_stores_none_of_its_batch",
    "test_a_second_run_started_or_finished_in_a_batch_is_refused",
    "test_records_of_two_runs_are_refused",
    "test_a_cut_short_batch_leaves_a_prefix",
    "test_asks_and_answers_in_a_batch_keep_their_rules",
)
#: The stores that do not implement RecordBatching yet: the kit reports them NOT APPLICABLE.
WITHOUT_BATCHING: tuple[str, ...] = ()


#: The rule for stores given credentials; the memory and file stores take none (declared off).
NEEDS_CREDENTIALS = "run_store::test_errors_hold_no_secrets"
WITHOUT_CREDENTIALS = ("memory", "jsonl", "sqlite")


def _contract_schemas() -> set[str]:
    """The schemas on the test server named like those contract-suite/conftest.py creates."""
    with admin() as connection:
        rows = connection.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'contract\\_%'"
        ).fetchall()
    return {str(row[0]) for row in rows}


@pytest.fixture(scope="module")
def schemas_before_the_suite() -> set[str]:
    return _contract_schemas()


@pytest.fixture(scope="module")
def suite_run(
    tmp_path_factory: pytest.TempPathFactory, schemas_before_the_suite: set[str]
) -> Result:
    report = tmp_path_factory.mktemp("contract-suite") / "junit.xml"
    return run_contract(REPO, "contract-suite", "--polyloop-contract", report=report)


def _store_tests(run: Result, store: str) -> dict[str, str]:
    return {
        key: outcome.outcome
        for key, outcome in run.tests.items()
        if key.startswith("run_store") and f"[{store}" in key
    }


def test_contract_suite_is_green(suite_run: Result) -> None:
    """Nothing fails, and the only skips are the durability rules the memory store declares
    off and the credentials rule the stores without credentials declare off."""
    assert 0 == suite_run.returncode, suite_run.output[-4000:]
    assert {} == {k: v.message[:300] for k, v in suite_run.failed().items()}
    skipped = {k for k, v in suite_run.tests.items() if v.outcome == "skipped"}
    assert skipped == {f"{name}[memory]" for name in NEEDS_REOPEN} | {
        f"{NEEDS_CREDENTIALS}[{store}]" for store in WITHOUT_CREDENTIALS
    } | {
        f"run_store_record_batching::{rule}[{store}]"
        for rule in BATCHING_RULES
        for store in WITHOUT_BATCHING
    }


def test_the_postgres_store_passes_every_record_batching_rule(suite_run: Result) -> None:
    """The kit's RecordBatching rules ran against the PostgreSQL store, and passed."""
    outcomes = _store_tests(suite_run, "postgres")
    batching = {k: v for k, v in outcomes.items() if k.startswith("run_store_record_batching::")}
    assert len(BATCHING_RULES) == len(batching)
    assert {k: "passed" for k in batching} == batching


@pytest.mark.parametrize("store", ["memory", "jsonl", "sqlite"])
def test_each_store_passes_every_store_rule(suite_run: Result, store: str) -> None:
    """Every RunStore rule ran for this store (stateful and lease rules included) and passed."""
    outcomes = _store_tests(suite_run, store)
    assert "passed" == outcomes.get(
        f"run_store_stateful::test_store_matches_a_model_of_the_log[{store}]"
    )
    assert len(outcomes) >= 33
    assert 5 == sum(1 for key in outcomes if key.startswith("run_store_leases::"))
    assert 5 == sum(1 for key in outcomes if key.startswith("run_store_user_asking::"))
    assert len(BATCHING_RULES) == sum(
        1 for key in outcomes if key.startswith("run_store_record_batching::")
    )
    durable = {f"{name}[{store}]" for name in NEEDS_REOPEN}
    expected_other = "skipped" if store == "memory" else "passed"
    assert {k: expected_other for k in durable} == {k: outcomes[k] for k in durable}
    credentials = f"{NEEDS_CREDENTIALS}[{store}]"
    assert "skipped" == outcomes[credentials]
    assert {} == {
        k: v for k, v in outcomes.items() if k not in durable | {credentials} and v != "passed"
    }


def test_every_seam_suite_ran(suite_run: Result) -> None:
    """The parser, model client, executor (scripted and registry) and sink suites all passed."""
    for suite in ("decision_parser", "model_client", "action_executor", "event_sink"):
        ran = [v.outcome for k, v in suite_run.tests.items() if k.startswith(f"{suite}::")]
        assert len(ran) >= 5, suite
        assert {"passed"} == set(ran), suite


def test_the_postgres_stores_leave_no_schema_behind(
    suite_run: Result, schemas_before_the_suite: set[str]
) -> None:
    """Every postgres store the kit made (one per rule, one per stateful example) is cleaned up
    through the factory's context manager: no schema of the run is left on the server."""
    postgres = {k: v.outcome for k, v in suite_run.tests.items() if "[postgres" in k}
    assert (
        "passed" == postgres["run_store_stateful::test_store_matches_a_model_of_the_log[postgres]"]
    )
    assert "passed" == postgres[f"{NEEDS_CREDENTIALS}[postgres]"]
    assert len(postgres) >= 33
    assert set() == _contract_schemas() - schemas_before_the_suite


def test_capability_report_names_the_memory_store(suite_run: Result) -> None:
    """The end-of-run report says which capability was declared off, and why."""
    assert "polyloop-contract report" in suite_run.output
    assert (
        "DECLARED OFF RunStore capability 'reopen' declared off (for [memory]): "
        "MemoryRunStore keeps its logs in the object" in suite_run.output
    )


def test_run_script_uses_the_installed_plugin() -> None:
    """contract-suite/run.sh runs pytest with the flag and relies on the entry point (no -p)."""
    script = (Path(REPO) / "contract-suite" / "run.sh").read_text()
    assert "pytest contract-suite --polyloop-contract" in script
    assert "-p polyloop_contract" not in script
