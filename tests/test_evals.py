"""Eval sets: CI runs every built-in kind's fixed-output cases (`ator eval run --ci`, a real
process), a changed validator that breaks a case fails that mode, and an org's eval runs
are stored over the API and compared across the kind's versions."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ator.analyses import Vocabulary, builtin_kinds, ci
from tests.conftest import operator_client

SRC = Path(__file__).resolve().parents[1] / "src"


def test_ci_mode_runs_every_built_in_kinds_cases_and_passes() -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-m", "ator.cli.main", "eval", "run", "--ci"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    for kind in builtin_kinds("scripted", "scripted"):
        assert f"{kind.name} v{kind.version}:" in done.stdout


async def test_every_kind_has_four_cases_and_the_verdicts_cover_accept_cut_reject_clean(
) -> None:
    kinds = builtin_kinds("scripted", "scripted")
    ok, reports = await ci(kinds)
    assert ok
    assert all(r.cases >= 4 for r in reports)
    seen = {case.expect for k in kinds for case in k.evals}
    assert {"accept", "cut", "reject", "clean"} <= seen


async def test_a_changed_validator_that_breaks_a_case_fails_ci() -> None:
    kinds = builtin_kinds("scripted", "scripted")
    # Someone makes the sentiment vocabulary lenient: an unknown value now becomes neutral.
    lenient = [dataclasses.replace(k, validators=(Vocabulary(
        "sentiment", ("positive", "neutral", "negative"), default="neutral"),))
        if k.name == "thread_sentiment" else k for k in kinds]
    ok, reports = await ci(lenient)
    assert not ok
    [report] = [r for r in reports if r.kind == "thread_sentiment"]
    failed = [c for c in report.results if not c["passed"]]
    assert [(c["case"], c["expect"], c["got"]) for c in failed] == [
        ("outside the vocabulary", "reject", "clean")]


SPEC: dict[str, Any] = {
    "output_schema": {"type": "object", "required": ["tone"]},
    "validators": [{"type": "vocabulary", "field": "tone", "values": ["calm", "angry"],
                    "on_miss": "reject"}],
    "rule": {"output": {"tone": "calm"}},
    "evals": [{"name": "ok", "output": '{"tone": "calm"}', "expect": "accept"},
              {"name": "cleaned", "output": '{"tone": "ANGRY"}', "expect": "clean"},
              {"name": "unknown", "output": '{"tone": "sad"}', "expect": "reject"},
              {"name": "prose", "output": "calm", "expect": "unparseable"}],
}


async def test_eval_runs_are_stored_and_compared_across_versions(make_ator: Any) -> None:
    async with operator_client(make_ator) as (client, key, _):
        h = {"authorization": f"Bearer {key}"}
        r = await client.put("/v1/analyses/kinds/tone", json={"spec": SPEC}, headers=h)
        assert r.status_code == 200, r.text
        first = await client.post("/v1/analyses/kinds/tone/evals", headers=h)
        assert first.status_code == 201, first.text
        assert (first.json()["passed"], first.json()["cases"]) == (4, 4)
        lenient = {**SPEC, "validators": [{**SPEC["validators"][0], "on_miss": "clean",
                                           "default": "calm"}]}
        r = await client.put("/v1/analyses/kinds/tone", json={"spec": lenient}, headers=h)
        assert r.json()["version"] == 2
        second = (await client.post("/v1/analyses/kinds/tone/evals", headers=h)).json()
        assert (second["version"], second["passed"]) == (2, 3)
        assert second["compared"]["previous_version"] == 1
        assert second["compared"]["regressed"] == ["unknown"]
        assert second["compared"]["previous_score"] == 1.0
        history = (await client.get("/v1/analyses/kinds/tone/evals", headers=h)).json()
        assert [run["kind_version"] for run in history["data"]] == [2, 1]


async def test_a_bad_spec_is_refused_with_its_code(make_ator: Any) -> None:
    async with operator_client(make_ator) as (client, key, _):
        h = {"authorization": f"Bearer {key}"}
        bad_rule = {**SPEC, "rule": {"output": {"mood": "x"}}}  # misses the required tone
        r = await client.put("/v1/analyses/kinds/tone", json={"spec": bad_rule}, headers=h)
        assert (r.status_code, r.json()["code"]) == (422, "invalid_kind")
        r = await client.put("/v1/analyses/kinds/thread_summary", json={"spec": SPEC},
                             headers=h)
        assert (r.status_code, r.json()["code"]) == (409, "kind_exists")
        r = await client.put("/v1/analyses/kinds/t", json={"spec": {
            **SPEC, "model": {"provider": "nope"}}}, headers=h)
        assert (r.status_code, r.json()["code"]) == (422, "unknown_provider")
        r = await client.post("/v1/analyses/runs", json={"kind": "missing", "target": "x"},
                              headers=h)
        assert (r.status_code, r.json()["code"]) == (404, "not_found")
