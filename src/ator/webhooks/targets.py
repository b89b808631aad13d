"""Where a mapped inbound webhook goes: a thread message, a workflow run or an analysis run
(layer: webhooks; imports agent.extension (Waker, Services), analyses and workflows (their
services), store (mailbox, threads, setups, webhook_inbound), errors).

Each delivery is idempotent per received request, so the inbound job may run twice:

- a message's client id is `webhook:<received id>` (the mailbox keeps one);
- a thread found by a key is looked up and, the first time, made and remembered in one
  transaction under a lock on (endpoint, key): two requests with one key reach one thread;
  a mapping without a key makes a thread per request (keyed by the request itself);
- a run's idempotency key is `webhook:<endpoint>:<key>` (or the request's id), so the
  same key starts one run.

A target that is gone or refuses the value (a trashed thread, an archived setup, input the
recipe refuses) is a `MappingError`: the request is kept failed and can be replayed.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from ator.agent.extension import Services, Waker
from ator.analyses import Analyses
from ator.errors import ConfigError, Conflict, NotFound, ValidationFailed
from ator.store import mailbox as mailbox_store
from ator.store import setups as setup_store
from ator.store import threads as thread_store
from ator.store import webhook_inbound as store
from ator.store.database import Database
from ator.store.scope import Scope
from ator.webhooks.mapping import Mapped, MappingError
from ator.workflows.service import Workflows

__all__ = ["Targets"]


class Targets:
    def __init__(self, db: Database, waker: Waker) -> None:
        self.db = db
        self.waker = waker
        self.services: Services | None = None  # the engine's, once bound (WebhooksExtension)

    def _services(self) -> Services:
        if self.services is None:
            raise ConfigError("webhook targets: the engine's services are not bound yet")
        return self.services

    async def check(self, scope: Scope, mapping: dict[str, Any]) -> UUID | None:
        """Check that what the mapping names is this org's; returns its fixed thread, if
        any. Raises NotFound (another org's is not found either)."""
        if mapping["to"] == "workflow":
            await self._services().get(Workflows).get(scope, UUID(mapping["workflow_id"]))
            return None
        if mapping["to"] == "analysis":
            await self._services().get(Analyses).kind(scope, mapping["kind"])
            return None
        if "setup_id" in mapping:
            setup = await setup_store.get_setup(self.db, scope, UUID(mapping["setup_id"]))
            if setup.archived_at is not None:
                raise NotFound("setup not found")
            return None
        thread = await thread_store.get_thread(self.db, scope, UUID(mapping["thread_id"]))
        return thread.id

    async def deliver(self, scope: Scope, endpoint: store.Inbound, received_id: UUID,
                      mapped: Mapped) -> dict[str, Any]:
        """Do what the mapping says; returns what it became. Raises MappingError."""
        mapping = endpoint.mapping
        if mapping["to"] == "workflow":
            return await self._run(scope, endpoint, received_id, mapped)
        if mapping["to"] == "analysis":
            return await self._analysis(scope, endpoint, mapped)
        if "thread_id" in mapping:
            thread_id = UUID(mapping["thread_id"])
        else:
            thread_id = await self._thread(scope, endpoint, mapped.key or
                                           f"received:{received_id}", mapped.title)
        assert mapped.text is not None
        try:
            _, created = await mailbox_store.submit(
                self.db, scope, thread_id, client_message_id=f"webhook:{received_id}",
                kind="message", content={"role": "user", "content": [
                    {"type": "text", "text": mapped.text}]})
        except NotFound:  # put in the trash: kept, replayable once restored or remapped
            raise MappingError("the mapping's thread is not there") from None
        if created:
            await self.waker.notify(scope, thread_id)
        return {"thread_id": str(thread_id)}

    async def _thread(self, scope: Scope, endpoint: store.Inbound, key: str,
                      title: str) -> UUID:
        setup_id = UUID(endpoint.mapping["setup_id"])
        async with self.db.begin() as conn:
            await store.lock_key(conn, endpoint.id, key)
            found = await store.thread_for_key(conn, endpoint.id, key)
            if found is not None:
                return found
            try:
                thread = await thread_store.create_thread(
                    self.db, scope, setup_id, title=title or f"{endpoint.name}: {key}"[:200],
                    metadata={"webhook": str(endpoint.id), "key": key}, within=conn)
            except ValidationFailed as exc:  # an archived setup, a title out of bounds
                raise MappingError(f"no thread could be made: {exc.message}") from None
            await store.remember_thread(conn, scope, endpoint.id, key, thread.id)
            return thread.id

    async def _analysis(self, scope: Scope, endpoint: store.Inbound,
                        mapped: Mapped) -> dict[str, Any]:
        assert mapped.target is not None
        try:
            job = await self._services().get(Analyses).trigger(
                scope, endpoint.mapping["kind"], mapped.target,
                origin=f"webhook:{endpoint.id}", options={"payload": mapped.input})
        except (NotFound, ValidationFailed) as exc:
            raise MappingError(f"the analysis could not be queued: {exc.message}") from None
        return {"analysis_job": job, "kind": endpoint.mapping["kind"],
                "target": mapped.target}

    async def _run(self, scope: Scope, endpoint: store.Inbound, received_id: UUID,
                   mapped: Mapped) -> dict[str, Any]:
        mapping = endpoint.mapping
        key = f"webhook:{endpoint.id}:{mapped.key}" if mapped.key else f"webhook:{received_id}"
        try:
            run, created = await self._services().get(Workflows).start(
                scope, UUID(mapping["workflow_id"]), mapped.input, key=key,
                version=mapping.get("version"))
        except (NotFound, ValidationFailed, Conflict) as exc:
            raise MappingError(f"the run could not start: {exc.message}") from None
        return {"run_id": str(run["id"]), "created": created}
