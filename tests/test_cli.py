"""The `ator` command as a user runs it: a subprocess on the test database, with its own data
dir and no provider keys. (Commands call asyncio.run, which cannot nest in the test loop.)

Also, in-process: remote chat against the real API app over an ASGI transport, and the turn
view's ordering of live deltas against persisted steps.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner

from ator import Ator, Scope
from ator.agent.system_prompt import CORE_VERSION
from ator.api.app import create_app
from ator.cli.conversation import RemoteConversation, TurnFollower
from ator.cli.main import app
from ator.cli.remote import ApiClient, RemoteError
from ator.cli.render import TurnView
from ator.cli.workspace import Workspace
from ator.settings import Settings
from ator.store import keys as key_store
from ator.store import orgs as org_store
from ator.store.database import open_database

UUID_RE = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.fixture
def cli_env(database_url: str, tmp_path: Path) -> dict[str, str]:
    # No ATOR_* from the outside (provider keys, Redis): the CLI sees only the test database.
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATOR_")}
    env.update(ATOR_DATABASE_URL=database_url, ATOR_DATA_DIR=str(tmp_path / "data"),
               COLUMNS="140", NO_COLOR="1")
    return env


async def ator(env: dict[str, str], *args: str, stdin: str | None = None,
               timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "ator.cli.main", *args], env=env, input=stdin,
        capture_output=True, text=True, timeout=timeout, check=False,
    )


def flat(text: str) -> str:
    """Text with rich's line wrapping undone."""
    return " ".join(text.split())


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("serve", "migrate", "demo", "chat", "doctor", "inspect", "tree", "admin"):
        assert command in result.output


async def test_demo_runs_a_conversation_and_prints_the_turn_records(cli_env) -> None:
    out = ok(await ator(cli_env, "demo", "--provider", "scripted"))
    # The scripted setup calls a tool, then echoes each message.
    for text in ("Hello! I am Ada. I love sailing.", "What do I love?",
                 "Name a good place for it."):
        assert f"You said: {text}" in out
    assert "⚙ calculator" in out and "calculator result: 42" in out
    assert "Turns, as recorded in the database" in out
    rows = [line for line in out.splitlines() if re.search(r"\bdone\b.*\bend_turn\b", line)]
    assert len(rows) == 3, out
    assert "Total $0.000000: 3 turns, 6 model calls" in out
    first_org = re.search(rf"org\s+demo ({UUID_RE}) \(new\)", out)
    first_setup = re.search(rf"setup\s+({UUID_RE}) \(new\)", out)
    assert first_org and first_setup, out

    # A second run reuses the org and setup it remembered in the data dir.
    again = ok(await ator(cli_env, "demo", "--provider", "scripted"))
    assert f"demo {first_org[1]} (reused)" in again
    assert f"setup     {first_setup[1]} (reused)" in again
    state = json.loads((Path(cli_env["ATOR_DATA_DIR"]) / "cli-state.json").read_text())
    [remembered] = state.values()
    assert remembered["org_id"] == first_org[1]


@pytest.mark.local_model
async def test_demo_with_the_packaged_local_model(cli_env) -> None:
    out = ok(await ator(cli_env, "demo", timeout=110))
    assert "local / smollm2-135m-instruct" in out
    assert out.count("ator › ") >= 3
    # Answered in full, or cut at the demo's output cap (the local model samples).
    rows = [line for line in out.splitlines()
            if re.search(r"^ *[0-9a-f]{8} +(done +end_turn|capped +max_tokens)\b", line)]
    assert len(rows) == 3, out
    assert "Total $0.000000: 3 turns" in out


async def test_admin_creates_an_org_and_a_key_that_authenticates(cli_env, settings_factory):
    name = f"acme-{uuid.uuid4().hex[:6]}"
    org_id = uuid.UUID(ok(await ator(cli_env, "admin", "create-org", name, "--budget", "12.5"))
                       .strip())
    key = ok(await ator(cli_env, "admin", "create-key", "--org", str(org_id),
                        "--email", "dev@acme.test", "--role", "member", "--name", "laptop")).strip()
    assert key.startswith("ator_")

    db = await open_database(settings_factory(), run_migrations=False)
    try:
        principal = await key_store.authenticate(db, key)
        assert principal is not None
        assert (principal.org_id, principal.role) == (org_id, "member")
        org = await org_store.get_org(db, Scope(org_id))
        assert org.name == name and str(org.monthly_budget_usd) == "12.500000"
    finally:
        await db.close()

    listed = ok(await ator(cli_env, "admin", "list-orgs"))
    assert name in listed and str(org_id) in listed

    bad = await ator(cli_env, "admin", "create-key", "--org", str(org_id), "--email",
                     "dev@acme.test", "--role", "owner")
    assert bad.returncode == 1 and "--role must be one of" in bad.stderr
    missing = await ator(cli_env, "admin", "create-key", "--org", str(uuid.uuid4()), "--email",
                         "dev@acme.test", "--role", "admin")
    assert missing.returncode == 1 and "org not found" in missing.stderr


async def test_admin_sets_the_operators_ceiling_that_bounds_the_orgs_budget(
    cli_env, settings_factory
):
    name = f"capped-{uuid.uuid4().hex[:6]}"
    refused = await ator(cli_env, "admin", "create-org", name, "--ceiling", "5",
                         "--budget", "20")
    assert refused.returncode == 1 and "above the org's ceiling" in refused.stderr
    org_id = uuid.UUID(ok(await ator(cli_env, "admin", "create-org", name, "--ceiling", "5",
                                     "--budget", "2")).strip())
    bad = await ator(cli_env, "admin", "create-org", "x", "--ceiling", "NaN")
    assert bad.returncode == 1 and "--ceiling must be a non-negative number" in bad.stderr
    lowered = ok(await ator(cli_env, "admin", "set-ceiling", str(org_id), "1.5"))
    assert lowered == ""  # the summary goes to stderr
    db = await open_database(settings_factory(), run_migrations=False)
    try:
        org = await org_store.get_org(db, Scope(org_id))
        assert (org.budget_ceiling_usd, org.monthly_budget_usd) == (Decimal("1.5"), Decimal(2))
        assert org.budget_limit_usd == Decimal("1.5")
        ok(await ator(cli_env, "admin", "set-ceiling", str(org_id), "none"))
        org = await org_store.get_org(db, Scope(org_id))
        assert org.budget_ceiling_usd is None and org.budget_limit_usd == Decimal(2)
    finally:
        await db.close()
    assert "ceiling" in ok(await ator(cli_env, "admin", "list-orgs"))


async def test_admin_bootstrap_creates_the_operator_key_once(cli_env, settings_factory):
    first = ok(await ator(cli_env, "admin", "bootstrap")).strip()
    if first:  # other tests of this session may have made a key already
        db = await open_database(settings_factory(), run_migrations=False)
        try:
            principal = await key_store.authenticate(db, first)
            assert principal is not None and principal.operator and principal.role == "admin"
        finally:
            await db.close()
    second = await ator(cli_env, "admin", "bootstrap")
    assert second.returncode == 0 and second.stdout == ""
    assert "nothing to do" in second.stderr


async def test_doctor_passes_on_the_test_database(cli_env) -> None:
    ok(await ator(cli_env, "migrate"))
    out = ok(await ator(cli_env, "doctor"))
    assert re.search(r"database\s+│ ok", out), out
    assert re.search(r"migrations\s+│ ok\s+│ at head", out), out
    assert re.search(r"coordinator\s+│ ok\s+│ local", out), out
    assert re.search(r"open files\s+│ (ok|warn)\s+│ soft \d+, hard", out), out
    assert "ready" in out


async def test_doctor_fails_without_a_database(cli_env) -> None:
    env = {**cli_env, "ATOR_DATABASE_URL": "postgresql://ator@127.0.0.1:1/nothing"}
    result = await ator(env, "doctor")
    assert result.returncode == 1
    assert re.search(r"database\s+│ fail \(required\)", result.stdout), result.stdout
    assert "not ready: database, migrations" in result.stdout


async def test_chat_one_shot_in_local_mode_echoes_and_continues_its_thread(cli_env) -> None:
    first = await ator(cli_env, "chat", "--provider", "scripted", "hello")
    assert "You said: hello" in ok(first)
    assert re.search(r"end_turn · 1 step · 10 in / 5 out · \$0\.000000", first.stdout)
    thread = re.search(rf"thread ({UUID_RE}) \(new\)", flat(first.stderr))
    assert thread, first.stderr

    second = await ator(cli_env, "chat", "--provider", "scripted", "again")
    assert "You said: again" in ok(second)
    assert f"thread {thread[1]} (continued)" in flat(second.stderr)


async def test_chat_session_reads_lines_until_quit(cli_env) -> None:
    result = await ator(cli_env, "chat", "--provider", "scripted", "--new",
                        stdin="one\n\ntwo\n/quit\nthree\n")
    out = ok(result)
    assert "You said: one" in out and "You said: two" in out
    assert "three" not in out


async def test_chat_flags_that_do_not_go_together_are_refused(cli_env) -> None:
    result = await ator(cli_env, "chat", "--thread", str(uuid.uuid4()), "--new", "hi")
    assert result.returncode == 1 and "--thread continues a thread" in result.stderr
    result = await ator(cli_env, "chat", "--url", "http://127.0.0.1:1", "hi")
    assert result.returncode == 1 and "needs an API key" in result.stderr


async def test_remote_chat_follows_a_turn_over_http(make_ator) -> None:
    """The remote client against the real API app: tool calls and the answer arrive as
    persisted steps, and the turn ends with its usage and cost."""
    async with make_ator() as runtime:
        api_app = create_app(runtime.settings, runtime=runtime)
        api_app.state.ator = runtime  # no lifespan under ASGITransport: the runtime is ours
        org = await runtime.create_org(f"remote-{uuid.uuid4().hex[:6]}")
        scope = Scope(org.id)
        user = await org_store.create_user(runtime.db, scope, "dev@remote.test", "admin")
        _, key = await key_store.create_key(runtime.db, scope, user_id=user, name="t",
                                            role="admin")
        client = ApiClient("http://ator.test", key,
                           transport=httpx.ASGITransport(app=api_app))
        try:
            setup = await client.post("/v1/setups", {
                "name": "remote", "provider": "scripted", "model": "scripted",
                "config": {"script": [
                    {"text": "Adding.",
                     "tool_calls": [{"name": "calculator", "input": {"expression": "2+3"}}]},
                    {"echo": True},
                ]},
            })
            thread = await client.post("/v1/threads", {"setup_id": setup["id"]})
            conversation = RemoteConversation(client, thread["id"])
            out = io.StringIO()
            view = TurnView(Console(file=out, width=120, no_color=True))
            sent = await conversation.send("what is 2+3?")
            ended = await TurnFollower(conversation, sent, view).run(timeout=30)
            assert ended["status"] == "done" and ended["stop_reason"] == "end_turn"
            assert ended["usage"]["input_tokens"] == 20 and ended["cost_usd"] == "0.000000"
            lines = out.getvalue().splitlines()
            assert lines[0] == "ator › Adding."
            assert lines[1].strip() == '⚙ calculator {"expression": "2+3"}'
            assert lines[2].strip() == "↳ calculator result: 5"
            assert lines[3] == "ator › You said: what is 2+3?"
            assert "end_turn · 2 steps · 20 in / 10 out · $0.000000" in lines[4]

            with pytest.raises(RemoteError) as info:
                await client.get(f"/v1/threads/{uuid.uuid4()}")
            assert info.value.status == 404 and info.value.code == "not_found"
        finally:
            await client.aclose()


def test_turn_view_holds_deltas_that_run_ahead_of_persisted_steps() -> None:
    out = io.StringIO()
    view = TurnView(Console(file=out, width=120, no_color=True))
    view.started("t1")
    # Step 1 streams and stops; step 2 streams before step 1's events are read back.
    view.delta({"type": "TextDelta", "text": "Let me ", "turn_id": "t1"})
    view.delta({"type": "TextDelta", "text": "check.", "turn_id": "t1"})
    view.delta({"type": "MessageStop", "stop_reason": "tool_use", "turn_id": "t1"})
    view.delta({"type": "TextDelta", "text": "It is 42.", "turn_id": "t1"})
    view.delta({"type": "TextDelta", "text": "ignored", "turn_id": "another turn"})
    view.event({"kind": "assistant", "data": {"stop_reason": "tool_use", "content": [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "u1", "name": "calculator", "input": {"expression": "6*7"}},
    ]}})
    view.event({"kind": "tool_results", "data": {"results": [
        {"type": "tool_result", "tool_use_id": "u1", "name": "calculator", "content": "42",
         "is_error": False},
    ]}})
    view.delta({"type": "MessageStop", "stop_reason": "end_turn", "turn_id": "t1"})
    view.event({"kind": "assistant", "data": {"stop_reason": "end_turn", "content": [
        {"type": "text", "text": "It is 42."}]}})
    view.ended({"turn_id": "t1", "status": "done", "stop_reason": "end_turn", "steps": 2,
                "usage": {"input_tokens": 7, "output_tokens": 3}, "cost_usd": "0.000012"})
    assert out.getvalue().splitlines() == [
        "ator › Let me check.",
        '  ⚙ calculator {"expression": "6*7"}',
        "  ↳ calculator result: 42",
        "ator › It is 42.",
        "  ╰ turn t1 · end_turn · 2 steps · 7 in / 3 out · $0.000012",
    ]



async def test_inspect_shows_each_call_of_a_turn(cli_env) -> None:
    ok(await ator(cli_env, "chat", "--provider", "scripted", "hello"))
    settings = Settings(database_url=cli_env["ATOR_DATABASE_URL"],
                        data_dir=cli_env["ATOR_DATA_DIR"])
    runtime = await Ator.open(settings, engine=False)
    try:
        ws = await Workspace.open(runtime)
        # The session's database is shared: the chat's thread is the org's newest.
        [thread] = await runtime.threads(ws.scope, limit=1)
        [turn] = await runtime.turns(ws.scope, thread.id)
    finally:
        await runtime.close()
    out = flat(ok(await ator(cli_env, "inspect", str(turn.id))))
    assert "step 1" in out and f"layers core v{CORE_VERSION}" in out
    assert "diff first call of the thread" in out
    raw = json.loads(ok(await ator(cli_env, "inspect", str(turn.id), "--json")))
    assert raw[0]["turn_id"] == str(turn.id) and raw[0]["request"]["layers"][0]["name"] == "core"
    missing = await ator(cli_env, "inspect", str(uuid.uuid4()))
    assert missing.returncode == 1 and "turn not found" in missing.stderr + missing.stdout
