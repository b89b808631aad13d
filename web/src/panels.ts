// Where later screens plug in: the model-call inspector (GET /v1/turns/{id}/calls,
// GET /v1/calls/{id}) and the subagent tree (GET /v1/threads/{id}/tree). A screen registers
// a tab of the thread view or an action on a turn's footer here; the thread view shows
// whatever is registered, so adding one touches no other screen.
import type { ComponentType } from "preact";
import type { Who } from "./api";
import type { Live } from "./live";

export interface ThreadTab {
  id: string;
  label: string;
  component: ComponentType<{ threadId: string; live: Live; who: Who }>;
}

export interface TurnAction {
  id: string;
  label: string;
  component: ComponentType<{ turnId: string; threadId: string }>;
}

export const threadTabs: ThreadTab[] = [];
export const turnActions: TurnAction[] = [];

export function registerThreadTab(tab: ThreadTab): void {
  threadTabs.push(tab);
}

export function registerTurnAction(action: TurnAction): void {
  turnActions.push(action);
}
