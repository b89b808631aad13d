"""Outbound webhooks end to end on real PostgreSQL, with a real receiver on loopback
(allowlisted in the test) that verifies every request with the `standardwebhooks` library:
retries keep one `webhook-id` and are logged, 410 disables the endpoint, a redirect is a
failed attempt whose target receives nothing, a private address is refused when the endpoint
is registered, and a turn whose end did not commit writes no event."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest
import sqlalchemy as sa
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from ator import Ator
from ator.errors import NotFound, ValidationFailed
from ator.store import turns as turn_store
from ator.store.scope import Scope
from ator.store.webhook_outbox import TurnOutbox
from ator.webhooks import Webhooks
from tests.conftest import _plain, ended, new_thread, wait_for_event
from tests.webhook_kit import FAST, scripted, until
from tests.webhook_receiver import Receiver, serve_receiver


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with serve_receiver() as made:
        yield made


async def one_turn(ator: Ator) -> tuple[Scope, Any]:
    scope, thread = await new_thread(ator, "s")
    await ator.submit(scope, thread.id, "hello")
    await wait_for_event(ator, scope, thread.id, ended)
    return scope, thread


async def test_three_500s_then_200_is_four_attempts_with_one_webhook_id(
        make_ator: Any, receiver: Receiver) -> None:
    receiver.answers["/flaky"] = [500, 500, 500, 200]
    async with make_ator(**scripted(), **FAST) as ator:
        await ator.start_jobs()
        org = await ator.create_org(f"wh-{uuid.uuid4().hex[:6]}")
        hooks = ator.service(Webhooks)
        endpoint, secret = await hooks.create_endpoint(Scope(org.id),
                                                       url=receiver.url("/flaky"))
        assert secret.startswith("whsec_")
        setup = await ator.create_setup(Scope(org.id), name="s", provider="s",
                                        model="scripted")
        thread = await ator.create_thread(Scope(org.id), setup.id)
        await ator.submit(Scope(org.id), thread.id, "hello")
        await wait_for_event(ator, Scope(org.id), thread.id, ended)

        seen = await receiver.wait_for("/flaky", 4)
        verifier = Webhook(secret)
        bodies = [verifier.verify(s.body, s.headers) for s in seen]  # raises when it fails
        assert len({s.headers["webhook-id"] for s in seen}) == 1
        assert bodies[0]["type"] == "turn.ended"
        assert bodies[0]["data"]["thread_id"] == str(thread.id)
        assert bodies[0]["data"]["status"] == "done"

        scope = Scope(org.id)

        async def delivered() -> bool:
            found = await hooks.deliveries(scope, endpoint.id)
            return bool(found) and found[0].status == "delivered"
        await until(delivered)
        [delivery] = await hooks.deliveries(scope, endpoint.id)
        _, log = await hooks.delivery(scope, delivery.id)
        assert [a.attempt for a in log] == [1, 2, 3, 4]
        assert [a.status_code for a in log] == [500, 500, 500, 200]
        assert all(a.latency_ms >= 0 and a.response_excerpt for a in log)
        assert len(log[0].response_excerpt or "") == ator.settings.webhook_response_excerpt
        assert len(receiver.at("/flaky")) == 4  # nothing after the success
        healthy = await hooks.get_endpoint(scope, endpoint.id)
        assert healthy.enabled and healthy.failing_since is None  # a success clears it

        # Replay sends the same message again, with the same webhook-id.
        await hooks.replay(scope, delivery.id)
        again = await receiver.wait_for("/flaky", 5)
        assert again[-1].headers["webhook-id"] == seen[0].headers["webhook-id"]
        verifier.verify(again[-1].body, again[-1].headers)
        # Another org sees none of it.
        with pytest.raises(NotFound):
            await hooks.get_endpoint(Scope(uuid.uuid4()), endpoint.id)
        with pytest.raises(NotFound):
            await hooks.delivery(Scope(uuid.uuid4()), delivery.id)


async def test_410_disables_the_endpoint(make_ator: Any, receiver: Receiver) -> None:
    receiver.answers["/gone"] = [410]
    async with make_ator(**scripted(), **FAST) as ator:
        await ator.start_jobs()
        scope, thread = await new_thread(ator, "s")
        hooks = ator.service(Webhooks)
        endpoint, _ = await hooks.create_endpoint(scope, url=receiver.url("/gone"),
                                                  event_types=["turn.ended"])
        await ator.submit(scope, thread.id, "hello")
        await receiver.wait_for("/gone", 1)

        async def disabled() -> bool:
            return not (await hooks.get_endpoint(scope, endpoint.id)).enabled
        await until(disabled)
        assert "410" in ((await hooks.get_endpoint(scope, endpoint.id)).disabled_reason or "")
        [delivery] = await hooks.deliveries(scope, endpoint.id)
        _, log = await hooks.delivery(scope, delivery.id)
        assert [a.status_code for a in log] == [410]

        # A disabled endpoint is sent nothing more: the next turn writes no delivery.
        await ator.submit(scope, thread.id, "again")
        await wait_for_event(ator, scope, thread.id, ended, after_seq=0)
        assert len(await hooks.deliveries(scope, endpoint.id)) == 1
        assert len(receiver.at("/gone")) == 1


async def test_a_redirect_is_a_failed_attempt_and_its_target_gets_nothing(
        make_ator: Any, receiver: Receiver) -> None:
    receiver.answers["/moved"] = [302]
    async with make_ator(**scripted(), **{**FAST, "webhook_retry_delays": (0.05,)}) as ator:
        await ator.start_jobs()
        scope, thread = await new_thread(ator, "s")
        hooks = ator.service(Webhooks)
        endpoint, _ = await hooks.create_endpoint(scope, url=receiver.url("/moved"))
        await ator.submit(scope, thread.id, "hello")
        await receiver.wait_for("/moved", 2)

        async def failed() -> bool:
            found = await hooks.deliveries(scope, endpoint.id)
            return bool(found) and found[0].status == "failed"
        await until(failed)
        [delivery] = await hooks.deliveries(scope, endpoint.id)
        _, log = await hooks.delivery(scope, delivery.id)
        assert len(log) == 2  # the schedule's one retry, then failed
        assert all(a.status_code is None and "redirect" in (a.error or "") for a in log)
        assert receiver.at("/target") == []
        assert (await hooks.get_endpoint(scope, endpoint.id)).enabled
        assert (await hooks.get_endpoint(scope, endpoint.id)).failing_since is not None

        # Replay by time range: the failed delivery runs its schedule again.
        now = datetime.now(UTC)
        assert await hooks.replay_range(scope, endpoint.id, since=now - timedelta(hours=1),
                                        until=now - timedelta(minutes=30)) == 0
        assert await hooks.replay_range(scope, endpoint.id, since=now - timedelta(hours=1),
                                        until=now + timedelta(minutes=1)) == 1
        await receiver.wait_for("/moved", 4)
        await until(failed)
        assert receiver.at("/target") == []


async def test_registration_refuses_private_and_plain_http_destinations(make_ator: Any) -> None:
    async with make_ator(**scripted()) as ator:  # nothing allowlisted
        hooks = ator.service(Webhooks)
        scope = Scope((await ator.create_org(f"wh-{uuid.uuid4().hex[:6]}")).id)
        for url in ("https://10.0.0.7/hook", "https://127.0.0.1:8443/hook",
                    "https://[::1]/hook", "https://169.254.169.254/latest",
                    "http://127.0.0.1:9/hook", "https://localhost/hook", "ftp://example.com/x",
                    "https://user@/x", "http://not-yet-published.example/hook"):
            with pytest.raises(ValidationFailed) as refused:
                await hooks.create_endpoint(scope, url=url)
            assert refused.value.code == "webhook_url_refused", url
            assert refused.value.status == 422
        with pytest.raises(ValidationFailed) as unknown:
            await hooks.create_endpoint(scope, url="https://10.0.0.7/",
                                        event_types=["turn.started"])
        assert unknown.value.code == "webhook_event_type_unknown"
        assert await hooks.list_endpoints(scope) == []
        # A name that resolves nowhere yet is accepted over https (each delivery is judged).
        later, _ = await hooks.create_endpoint(scope, url="https://not-yet.example/hook")
        assert [e.id for e in await hooks.list_endpoints(scope)] == [later.id]


async def test_a_turn_end_that_did_not_commit_writes_no_event(
        make_ator: Any, receiver: Receiver) -> None:
    async with make_ator(**scripted(), **FAST) as ator:
        await ator.start_jobs()
        scope, thread = await new_thread(ator, "s")
        hooks = ator.service(Webhooks)
        endpoint, _ = await hooks.create_endpoint(scope, url=receiver.url("/once"))
        await ator.submit(scope, thread.id, "hello")
        await receiver.wait_for("/once", 1)
        [turn] = await turn_store.list_turns(ator.db, scope, thread.id)
        # The same final statement again, for a turn that is no longer running (as when
        # the reaper or a stop closed it first): nothing is written, no job, no event.
        write = await turn_store.write_step(
            ator.db, scope, thread.id, turn.id, [], steps=1,
            parts=[turn_store.Finished("done", "end_turn"),
                   TurnOutbox((("turn.ended", "{}"),))])
        assert write.live is False
        assert write.extra["webhook_jobs"] == 0
        assert len(await hooks.deliveries(scope, endpoint.id)) == 1
        assert len(receiver.at("/once")) == 1


async def test_a_rotated_secret_signs_beside_the_old_one_during_the_overlap(
        make_ator: Any, receiver: Receiver) -> None:
    async with make_ator(**scripted(), **FAST) as ator:
        await ator.start_jobs()
        scope = Scope((await ator.create_org(f"wh-{uuid.uuid4().hex[:6]}")).id)
        hooks = ator.service(Webhooks)
        endpoint, old = await hooks.create_endpoint(scope, url=receiver.url("/rot"),
                                                    event_types=["turn.ended"])
        rotated, new = await hooks.rotate_secret(scope, endpoint.id, overlap=3600)
        assert new != old and rotated.previous_until is not None
        # A test-send reaches the endpoint whatever its filters.
        await hooks.send_test(scope, endpoint.id)
        [seen] = await receiver.wait_for("/rot", 1)
        assert len(seen.headers["webhook-signature"].split(" ")) == 2
        for secret in (old, new):
            assert Webhook(secret).verify(seen.body, seen.headers)["type"] == "webhook.test"

        # With no overlap the previous secret (`new`) stops signing at once.
        _, newest = await hooks.rotate_secret(scope, endpoint.id, overlap=0)
        await hooks.send_test(scope, endpoint.id)
        second = (await receiver.wait_for("/rot", 2))[1]
        assert len(second.headers["webhook-signature"].split(" ")) == 1
        Webhook(newest).verify(second.body, second.headers)
        with pytest.raises(WebhookVerificationError):
            Webhook(new).verify(second.body, second.headers)
        with pytest.raises(NotFound):
            await hooks.send_test(Scope(uuid.uuid4()), endpoint.id)
        with pytest.raises(NotFound):
            await hooks.rotate_secret(Scope(uuid.uuid4()), endpoint.id, overlap=60)


async def test_an_endpoint_failing_for_too_long_is_disabled(
        make_ator: Any, receiver: Receiver) -> None:
    receiver.answers["/down"] = [503]
    async with make_ator(**scripted(), **FAST, webhook_disable_after=0) as ator:
        await ator.start_jobs()
        scope = Scope((await ator.create_org(f"wh-{uuid.uuid4().hex[:6]}")).id)
        hooks = ator.service(Webhooks)
        endpoint, _ = await hooks.create_endpoint(scope, url=receiver.url("/down"))
        await hooks.send_test(scope, endpoint.id)
        await receiver.wait_for("/down", 1)

        async def disabled() -> bool:
            return not (await hooks.get_endpoint(scope, endpoint.id)).enabled
        await until(disabled)
        reason = (await hooks.get_endpoint(scope, endpoint.id)).disabled_reason or ""
        assert reason.startswith("every attempt failed since ")
        [delivery] = await hooks.deliveries(scope, endpoint.id)
        assert delivery.status == "failed" and delivery.attempts == 1  # no retry once disabled


async def test_an_endpoint_deleted_while_its_attempt_is_written_does_not_deadlock(
        make_ator: Any, receiver: Receiver, database_url: str) -> None:
    # The check machine's CI once saw DELETE /v1/webhooks/endpoints/{id} deadlock with its
    # test delivery's attempt: the delete locks the endpoint, then its cascade the delivery;
    # the attempt's transaction locked the delivery, then the endpoint. Here the delete is
    # held between the two (a row lock on the endpoint from another connection) until the
    # attempt's transaction waits for it: both orders meet.
    async with make_ator(**scripted(), **FAST) as ator:
        scope = Scope((await ator.create_org(f"wh-{uuid.uuid4().hex[:6]}")).id)
        hooks = ator.service(Webhooks)
        endpoint, _ = await hooks.create_endpoint(scope, url=receiver.url("/deleted"))
        delivery_id = await hooks.send_test(scope, endpoint.id)  # its insert shares the row
        side = await asyncpg.connect(_plain(database_url))
        try:
            deleting = side.transaction()
            await deleting.start()
            await side.execute("SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR UPDATE",
                               endpoint.id)
            await ator.start_jobs()
            await receiver.wait_for("/deleted", 1)

            async def attempt_waits() -> bool:
                return bool(await side.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"))
            await until(attempt_waits)
            await side.execute("DELETE FROM webhook_endpoints WHERE id = $1", endpoint.id)
            await deleting.commit()
        finally:
            await side.close()

        async def finished() -> bool:
            return bool(await ator.db.read(sa.text(
                "SELECT 1 FROM jobs WHERE payload->>'delivery_id' = :d AND state <> 'queued'"
                " AND state <> 'running'"), {"d": str(delivery_id)}))
        await until(finished)
        [job] = await ator.db.read(sa.text(
            "SELECT state, attempt, last_error FROM jobs WHERE payload->>'delivery_id' = :d"),
            {"d": str(delivery_id)})
        assert (job.state, job.attempt, job.last_error) == ("done", 1, None)
        assert len(receiver.at("/deleted")) == 1
        with pytest.raises(NotFound):
            await hooks.get_endpoint(scope, endpoint.id)
