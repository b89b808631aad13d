// A chat's history over HTTP, newest page first: `GET /v1/threads/{id}/events?before=N&limit=M`
// answers the frames of the last M events below seq N, oldest first, and whether older ones exist. The chat
// opens on the latest page, follows the socket from its last seq, and reads the page before
// its oldest one when the reader scrolls up: no replay from seq 0, and memory grows with what
// was scrolled through, not with the thread's length.
import { api } from "./api";
import type { Frame } from "./live";

export const PAGE_EVENTS = 60;

export interface Page {
  frames: Frame[];
  hasOlder: boolean;
  firstSeq: number | null; // where the next (older) page ends
  lastSeq: number | null;
}

/** The page of events below seq `before` (null: the latest page). */
export async function readPage(threadId: string, before: number | null, lastSeq: number): Promise<Page> {
  const below = before ?? lastSeq + 1;
  if (below <= 1) return { frames: [], hasOlder: false, firstSeq: null, lastSeq: null };
  const q = new URLSearchParams({ before: String(below), limit: String(PAGE_EVENTS) });
  // The page holds the same frames the socket sends ({v, seq, type, data}: engine/wire.py).
  const r = await api<{ data: Frame[]; has_older: boolean }>("GET", `/v1/threads/${threadId}/events?${q}`);
  const frames = r.data;
  return {
    frames,
    hasOlder: r.has_older,
    firstSeq: frames.length ? frames[0].seq : null,
    lastSeq: frames.length ? frames[frames.length - 1].seq : null,
  };
}
