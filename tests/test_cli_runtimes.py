"""The CLI runtimes end to end, against fake `claude` and `codex` executables written here
(tests/fake_cli.py replaying tests/cli_streams.py): turns through the engine, real
subprocesses and process groups, real PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ator import Ator, Scope
from ator.errors import ValidationFailed
from ator.store import model_calls as call_store
from ator.store.schema import provider_sessions
from tests import cli_streams as rec
from tests.conftest import ended, wait_for_event

FAKE = Path(__file__).with_name("fake_cli.py")


@dataclass
class Fake:
    root: Path
    scenario: Path
    dump: Path

    def play(self, lines: list[Any], **more: Any) -> None:
        self.scenario.write_text(json.dumps({"dump": str(self.dump), "lines": lines, **more}))

    def runs(self) -> list[dict[str, Any]]:
        if not self.dump.exists():
            return []
        return [json.loads(x) for x in self.dump.read_text().splitlines() if x]


@pytest.fixture
def fake(tmp_path: Path) -> Fake:
    root = tmp_path / "bin"
    root.mkdir()
    for name in ("claude", "codex"):
        exe = root / name
        exe.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    made = Fake(root, tmp_path / "scenario.json", tmp_path / "runs.jsonl")
    made.play([])
    return made


@pytest.fixture
def cli_ator(make_ator: Any, fake: Fake, monkeypatch: pytest.MonkeyPatch
             ) -> Callable[..., Any]:
    # The server's own secrets: none may reach a CLI child.
    monkeypatch.setenv("ATOR_TEST_SERVER_SECRET", "ator-secret-value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "operator-secret-value")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "server-process-key")

    @asynccontextmanager
    async def opened(**settings: Any) -> AsyncIterator[Ator]:
        base: dict[str, Any] = {
            "claude_cli_path": fake.root / "claude", "codex_cli_path": fake.root / "codex",
            "cli_env": {"FAKE_SCENARIO": str(fake.scenario), "ANTHROPIC_API_KEY": "cli-key",
                        "OPENAI_API_KEY": "cli-key"},
            "cli_after_result": 0.5, "cli_kill_grace": 0.3}
        base.update(settings)
        async with make_ator(**base) as ator:
            yield ator

    return opened


async def _thread(ator: Ator, provider: str, model: str, config: dict[str, Any] | None = None,
                  ) -> tuple[Scope, Any, Any]:
    org = await ator.create_org(f"org-{uuid.uuid4().hex[:6]}")
    scope = Scope(org.id)
    setup = await ator.create_setup(scope, name="cli", provider=provider, model=model,
                                    config=config)
    return scope, await ator.create_thread(scope, setup.id), setup


async def _turn(ator: Ator, scope: Scope, thread: Any, text: str, after: int = 0) -> Any:
    await ator.submit(scope, thread.id, text)
    return await wait_for_event(ator, scope, thread.id, ended, after_seq=after, timeout=60)


async def _events(ator: Ator, scope: Scope, thread: Any, kind: str) -> list[Any]:
    return [e for e in await ator.events(scope, thread.id) if e.kind == kind]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) is gone for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


async def _gone(pids: list[int], within: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while any(_alive(p) for p in pids):
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


async def test_a_claude_turn_streams_its_tools_costs_what_it_reports_and_resumes(
    cli_ator: Any, fake: Fake, tmp_path: Path
) -> None:
    fake.play(rec.claude_turn())
    async with cli_ator() as ator:
        scope, thread, _ = await _thread(ator, "claude_cli", "sonnet",
                                         {"permission_mode": "acceptEdits"})
        end = await _turn(ator, scope, thread, "What is in here?")
        assert end.data["status"] == "done", end.data
        reply = (await _events(ator, scope, thread, "assistant"))[-1].data["content"]
        assert [b["type"] for b in reply] == ["text", "native_tool_call", "native_tool_result",
                                              "text"]
        assert reply[0]["text"] == "Let me look."  # deltas, not repeated by `assistant`
        assert reply[1] == {"type": "native_tool_call", "id": "toolu_01", "name": "Bash",
                            "input": {"command": "ls"}}
        assert reply[2]["content"] == "README.md\n" and reply[2]["is_error"] is False
        assert not await _events(ator, scope, thread, "tool_results")  # never re-run
        # The turn costs what the CLI said, flagged as the provider's figure.
        assert Decimal(end.data["cost_usd"]) == Decimal(str(rec.CLAUDE_COST))
        assert end.data["cost_source"] == "provider"
        calls = (await call_store.turn_calls(ator.db, scope, end.turn_id)).calls
        assert [c.cost_source for c in calls] == ["provider"]
        assert calls[0].cache_write_tokens == 100 and calls[0].output_tokens == 50

        run = fake.runs()[-1]
        argv = run["argv"]
        assert argv[:5] == ["-p", "--output-format", "stream-json", "--verbose",
                            "--include-partial-messages"]
        assert "--model=sonnet" in argv and "--permission-mode=acceptEdits" in argv
        assert "--max-turns=100" in argv and "--max-budget-usd=10" in argv
        assert "--setting-sources=" in argv and "--strict-mcp-config" in argv
        settings = next(a for a in argv if a.startswith("--settings="))
        overlay = Path(settings.split("=", 1)[1]).read_text()  # noqa: ASYNC240 (a small local file)
        assert json.loads(overlay)["disableAllHooks"]
        assert not any(a.startswith("--resume") for a in argv)
        assert "What is in here?" in run["stdin"]  # the prompt on stdin, closed after it
        # The jail: the org's workspace, and nothing of the server's environment but the
        # allow-list and what the operator gave CLIs.
        assert Path(run["cwd"]) == tmp_path / "data" / "workspaces" / str(scope.org_id)
        env = run["env"]
        assert not [k for k in env if k.startswith("ATOR_")]
        assert "ator-secret-value" not in env.values()
        assert "AWS_SECRET_ACCESS_KEY" not in env
        assert env["ANTHROPIC_API_KEY"] == "cli-key"  # the operator's CLI key, not the server's
        assert run["pgid"] == run["pid"]  # a process group of its own

        # The next turn resumes the CLI's session, in the equals form.
        fake.play(rec.claude_turn())
        end2 = await _turn(ator, scope, thread, "And now?", after=end.seq)
        assert end2.data["status"] == "done"
        assert f"--resume={rec.SESSION}" in fake.runs()[-1]["argv"]


async def test_a_codex_turn_is_priced_from_the_catalog_per_call_not_cumulative(
    cli_ator: Any, fake: Fake
) -> None:
    first = {"input_tokens": 24763, "cached_input_tokens": 24448, "output_tokens": 122}
    fake.play(rec.codex_turn(first))
    async with cli_ator() as ator:
        scope, thread, _ = await _thread(ator, "codex_cli", "gpt-5-codex",
                                         {"sandbox": "workspace-write"})
        end = await _turn(ator, scope, thread, "List the files")
        assert end.data["status"] == "done", end.data
        reply = (await _events(ator, scope, thread, "assistant"))[-1].data["content"]
        kinds = [b["type"] for b in reply]
        assert kinds == ["thinking", "native_tool_call", "native_tool_result",
                         "native_tool_call", "native_tool_result", "text"]
        assert reply[1]["name"] == "shell" and reply[1]["input"] == {"command": "bash -lc ls"}
        assert reply[-1]["text"] == "One file: README.md."  # the update, then the rest
        price = ator.prices.lookup("gpt-5-codex")
        assert price is not None

        def cost(inp: int, cached: int, out: int) -> Decimal:
            usd = ((inp - cached) * price.input + cached * price.cache_read
                   + out * price.output) / Decimal(1_000_000)
            return usd.quantize(Decimal("0.000001"))

        assert Decimal(end.data["cost_usd"]) == cost(24763, 24448, 122)
        assert end.data["cost_source"] == "catalog"  # computed by ator, said so
        argv = fake.runs()[-1]["argv"]
        assert argv[:2] == ["exec", "--json"] and "--sandbox=workspace-write" in argv
        assert argv[-1] == "-" and "resume" not in argv
        assert fake.runs()[-1]["env"]["CODEX_HOME"].endswith(str(scope.org_id))

        # The second run reports the session's total: the call is the difference.
        second = {"input_tokens": 50000, "cached_input_tokens": 49000, "output_tokens": 222}
        fake.play(rec.codex_turn(second))
        end2 = await _turn(ator, scope, thread, "Again", after=end.seq)
        assert end2.data["status"] == "done"
        assert Decimal(end2.data["cost_usd"]) == cost(50000 - 24763, 49000 - 24448, 100)
        argv = fake.runs()[-1]["argv"]
        assert argv[-3:] == ["resume", rec.THREAD, "-"]


FAILURES = {
    "exit": ([rec.INIT, *rec.message("m1", "partial words", {"input_tokens": 5,
                                                              "output_tokens": 3})],
             {"exit": 3}, "error:cli_no_result"),
    "exit-after-result": ([rec.INIT, *rec.message("m1", "partial words", {}), rec.result()],
                          {"exit": 2}, "error:cli_exit"),
    "no-result": ([rec.INIT, *rec.message("m1", "partial words", {})], {},
                  "error:cli_no_result"),
    "empty-result": ([rec.INIT, *rec.message("m1", "partial words", {}), rec.result("")], {},
                     "error:cli_empty_result"),
    "is-error": ([rec.INIT, *rec.message("m1", "partial words", {}),
                  rec.result("API Error: 500", is_error=True)], {"exit": 1}, "error:cli_error"),
    "non-json": ([rec.INIT, *rec.message("m1", "partial words", {}), {"raw": "Traceback:"}],
                 {}, "error:cli_bad_output"),
    "10MB-line": ([rec.INIT, *rec.message("m1", "partial words", {}),
                   {"big": 10 * 1024 * 1024}], {}, "error:cli_line_too_long"),
}


@pytest.mark.parametrize("case", list(FAILURES))
async def test_each_failure_ends_the_turn_typed_keeping_and_billing_what_came(
    cli_ator: Any, fake: Fake, case: str
) -> None:
    lines, more, reason = FAILURES[case]
    fake.play(lines, **more)
    async with cli_ator() as ator:
        scope, thread, _ = await _thread(ator, "claude_cli", "sonnet")
        end = await _turn(ator, scope, thread, "Go")
        assert end.data["stop_reason"] == reason, end.data
        assert end.data["status"] == "error"
        kept = await _events(ator, scope, thread, "assistant")
        assert kept and kept[-1].data.get("interrupted"), "the partial reply is kept"
        assert kept[-1].data["content"][0]["text"] == "partial words"
        calls = (await call_store.turn_calls(ator.db, scope, end.turn_id)).calls
        assert len(calls) == 1
        if case in ("exit-after-result", "is-error"):  # the CLI reported its cost: billed
            assert calls[0].cost_source == "provider"
            assert calls[0].cost_usd == Decimal(str(rec.CLAUDE_COST))


async def test_a_stream_that_hangs_is_cut_at_the_stall_cap_and_its_group_killed(
    cli_ator: Any, fake: Fake
) -> None:
    fake.play([rec.INIT, *rec.message("m1", "thinking about it", {}), {"hang": True}],
              ignore_term=True, child=True)
    async with cli_ator() as ator:
        scope, thread, _ = await _thread(ator, "claude_cli", "sonnet",
                                         {"caps": {"stall_timeout": 1.0}})
        end = await _turn(ator, scope, thread, "Go")
        assert end.data["stop_reason"] == "stalled", end.data
        run = fake.runs()[-1]
        # SIGTERM was ignored by both: SIGKILL of the group took them.
        assert await _gone([run["pid"], run["child"]], within=5.0)
        kept = (await _events(ator, scope, thread, "assistant"))[-1]
        assert kept.data["interrupted"] and kept.data["content"][0]["text"] == \
            "thinking about it"


async def test_a_cli_that_hangs_after_its_result_is_stopped_and_the_turn_is_done(
    cli_ator: Any, fake: Fake
) -> None:
    fake.play(rec.claude_turn(), after="hang", child=True)
    async with cli_ator() as ator:
        scope, thread, _ = await _thread(ator, "claude_cli", "sonnet")
        end = await _turn(ator, scope, thread, "Go")
        assert end.data["status"] == "done", end.data
        run = fake.runs()[-1]
        assert await _gone([run["pid"], run["child"]], within=5.0)


@pytest.mark.parametrize("how", ["stop", "timeout"])
async def test_stop_and_turn_timeout_kill_the_whole_group_within_a_second(
    cli_ator: Any, fake: Fake, how: str
) -> None:
    fake.play([rec.INIT, *rec.message("m1", "working", {}), {"hang": True}],
              ignore_term=True, child=True)
    async with cli_ator() as ator:
        config = {"caps": {"turn_timeout": 2.0}} if how == "timeout" else None
        scope, thread, _ = await _thread(ator, "claude_cli", "sonnet", config)
        await ator.submit(scope, thread.id, "Go")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        # The child process writes its dump file: nothing to await but the file itself.
        while not fake.runs() and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        run = fake.runs()[-1]
        if how == "stop":  # the CLI runs (it wrote its dump): stop the turn
            await ator.stop(scope, thread.id)
        end = await wait_for_event(ator, scope, thread.id, ended, timeout=30)
        assert end.data["stop_reason"] == ("cancelled:user" if how == "stop" else "timeout")
        # The group is gone within a second of the turn's end (SIGTERM ignored: SIGKILL).
        assert await _gone([run["pid"], run["child"]], within=1.0)


async def test_a_model_id_with_shell_metacharacters_is_refused_at_setup_creation(
    cli_ator: Any
) -> None:
    async with cli_ator() as ator:
        org = await ator.create_org(f"org-{uuid.uuid4().hex[:6]}")
        for model in ['sonnet"; rm -rf ~', "--dangerously-skip-permissions", "a b", "$(id)"]:
            for provider in ("claude_cli", "codex_cli"):
                with pytest.raises(ValidationFailed) as got:
                    await ator.create_setup(Scope(org.id), name="x", provider=provider,
                                            model=model)
                assert got.value.code == "invalid_model"


async def test_a_cli_not_installed_or_not_logged_in_is_refused_with_the_fix(
    cli_ator: Any, fake: Fake, tmp_path: Path
) -> None:
    async with cli_ator(claude_cli_path=tmp_path / "nowhere" / "claude",
                        cli_env={"HOME": str(tmp_path / "home")},
                        codex_home=tmp_path / "no-codex") as ator:
        org = await ator.create_org(f"org-{uuid.uuid4().hex[:6]}")
        with pytest.raises(ValidationFailed) as got:
            await ator.create_setup(Scope(org.id), name="x", provider="claude_cli",
                                    model="sonnet")
        assert got.value.code == "cli_not_installed" and "ATOR_CLAUDE_CLI_PATH" in \
            got.value.message
        with pytest.raises(ValidationFailed) as got:
            await ator.create_setup(Scope(org.id), name="x", provider="codex_cli",
                                    model="gpt-5-codex")
        assert got.value.code == "cli_not_logged_in" and "codex login" in got.value.message


async def test_doctor_lists_each_cli_with_its_version_or_the_fix(
    fake: Fake, settings_factory: Any, tmp_path: Path
) -> None:
    from ator.cli.doctor import run_checks

    ready = settings_factory(claude_cli_path=fake.root / "claude",
                             codex_cli_path=fake.root / "codex",
                             cli_env={"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "k"})
    checks = {c.name: c for c in await run_checks(ready)}
    for provider, command in (("claude_cli", "claude"), ("codex_cli", "codex")):
        row = checks[f"runtime {provider}"]
        assert row.status == "ok" and f"9.9.9 ({command} fake)" in row.detail, row
        assert str(fake.root / command) in row.detail and not row.required
    missing = settings_factory(claude_cli_path=tmp_path / "nowhere" / "claude",
                               codex_cli_path=fake.root / "codex",
                               cli_env={"HOME": str(tmp_path / "home")},
                               codex_home=tmp_path / "no-codex")
    checks = {c.name: c for c in await run_checks(missing)}
    claude, codex = checks["runtime claude_cli"], checks["runtime codex_cli"]
    assert claude.status == "missing" and "ATOR_CLAUDE_CLI_PATH" in claude.fix, claude
    assert codex.status == "missing" and "not logged in" in codex.detail, codex
    assert "codex login" in codex.fix and "9.9.9" in codex.detail


async def test_a_cli_turns_one_prompt_is_recorded_by_the_inspector_with_its_sources(
    cli_ator: Any, fake: Fake
) -> None:
    fake.play(rec.claude_turn())
    async with cli_ator() as ator:
        scope, thread, _ = await _thread(ator, "claude_cli", "sonnet")
        end = await _turn(ator, scope, thread, "First question")
        assert end.data["status"] == "done", end.data
        (call,) = (await call_store.turn_calls(ator.db, scope, end.turn_id)).calls
        meta = call.request_meta
        names = [x["name"] for x in meta["layers"]]
        assert names[0] == "core" and not any(n.startswith("context:") for n in names)
        assert all(len(x["hash"]) == 16 and x["chars"] > 0 for x in meta["layers"])
        assert meta["single_prompt"]["sources"] == [] and meta["single_prompt"]["budget_tokens"]
        # What was packed is what the CLI got on stdin: each head layer's text, then the task.
        stdin = fake.runs()[-1]["stdin"]
        assert "First question" in stdin and "## core" in stdin

        # Without a session to resume, the next turn carries the conversation as a section
        # (its source named); with one, the record says it was left out and why.
        await ator.db.write(sa.delete(provider_sessions).where(
            provider_sessions.c.thread_id == thread.id))
        fake.play(rec.claude_turn())
        end2 = await _turn(ator, scope, thread, "Second question", after=end.seq)
        (call2,) = (await call_store.turn_calls(ator.db, scope, end2.turn_id)).calls
        packed = call2.request_meta["single_prompt"]
        assert packed["sources"] == [f"thread:{thread.id}:recent"]
        recent = next(x for x in call2.request_meta["layers"] if x["name"] == "context:recent")
        assert recent["source"] == f"thread:{thread.id}:recent" and recent["priority"] == 20
        assert "First question" in fake.runs()[-1]["stdin"]

        fake.play(rec.claude_turn())
        end3 = await _turn(ator, scope, thread, "Third question", after=end2.seq)
        (call3,) = (await call_store.turn_calls(ator.db, scope, end3.turn_id)).calls
        skipped = call3.request_meta["single_prompt"]["skipped"]
        assert {s["kind"] for s in skipped} == {"recent"}
        assert all(s["reason"] == "the runtime's resumed session holds it" for s in skipped)
        assert f"--resume={rec.SESSION}" in fake.runs()[-1]["argv"]
        assert "First question" not in fake.runs()[-1]["stdin"]
