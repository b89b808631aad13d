// The one socket of the console: org pushes (busy/idle, turn ended, approval decided),
// followed threads and followed workflow runs. WebSocket transport only, so an idle page makes
// no HTTP requests at all. On every (re)connect each followed thread or run is joined again
// from the last seq it saw: the server replays exactly what was missed, then streams live.
import { io, type Socket } from "socket.io-client";

export interface Frame {
  v: number;
  seq: number | null;
  type: string;
  data: any;
}

type Listener = (frame: Frame) => void;

interface Follow {
  lastSeq: number;
  listeners: Set<Listener>;
}

// The last frames received, in order, for the browser tests and for a person debugging: a
// bounded ring (a long-lived tab does not grow), and never token deltas (a reply's deltas are
// shown by the chat until its persisted step replaces them; only their count is kept).
export const FRAMES_KEPT = 200;
declare global {
  interface Window {
    __atorFrames: Frame[];
    __atorDeltas: number;
    __atorLive: Live | undefined;
  }
}
window.__atorFrames = [];
window.__atorDeltas = 0;

function keep(frame: Frame): void {
  if (frame.type === "delta") {
    window.__atorDeltas += 1;
    return;
  }
  const kept = window.__atorFrames;
  kept.push(frame);
  if (kept.length > FRAMES_KEPT) kept.splice(0, kept.length - FRAMES_KEPT);
}

// `thread:<id>` → {thread_id}, `run:<id>` → {run_id}: what join and leave name.
function target(room: string): Record<string, string> {
  const [kind, id] = room.split(":");
  return kind === "run" ? { run_id: id } : { thread_id: id };
}

export class Live {
  socket: Socket;
  status: "connecting" | "live" | "offline" = "connecting";
  private follows = new Map<string, Follow>();
  private orgListeners = new Set<Listener>();
  private statusListeners = new Set<(s: Live["status"]) => void>();

  constructor(csrf: string) {
    this.socket = io({
      path: "/socket.io/",
      transports: ["websocket"],
      auth: { csrf },
      reconnectionDelay: 300,
      reconnectionDelayMax: 3000,
    });
    this.socket.on("connect", () => {
      this.setStatus("live");
      for (const [room, f] of this.follows) this.join(room, f.lastSeq);
    });
    this.socket.on("disconnect", () => this.setStatus("offline"));
    this.socket.on("connect_error", () => this.setStatus("offline"));
    this.socket.on("frame", (frame: Frame) => this.dispatch(frame));
    window.__atorLive = this;
  }

  /** The session's new CSRF token (an SSO refresh made a new session): sent on reconnects. */
  setCsrf(csrf: string): void {
    this.socket.auth = { csrf };
  }

  private setStatus(s: Live["status"]): void {
    this.status = s;
    for (const l of this.statusListeners) l(s);
  }

  onStatus(l: (s: Live["status"]) => void): () => void {
    this.statusListeners.add(l);
    return () => this.statusListeners.delete(l);
  }

  private dispatch(frame: Frame): void {
    keep(frame);
    if (frame.type === "turn.started" || frame.type === "turn.ended" || frame.type === "approval.decided") {
      for (const l of this.orgListeners) l(frame);
      return;
    }
    const threadId: string | undefined = frame.data?.thread_id;
    const runId: string | undefined = frame.data?.run_id;
    const room = threadId ? `thread:${threadId}` : runId ? `run:${runId}` : undefined;
    const f = room ? this.follows.get(room) : undefined;
    if (!f) return;
    if (frame.seq !== null) {
      if (frame.seq <= f.lastSeq) return; // already shown (the server should not resend)
      f.lastSeq = frame.seq;
    }
    for (const l of f.listeners) l(frame);
  }

  private join(room: string, afterSeq: number): void {
    this.socket.emit("join", { ...target(room), after_seq: afterSeq }, (ack: any) => {
      if (!ack?.ok) console.warn("join refused", ack?.error);
    });
  }

  onOrg(l: Listener): () => void {
    this.orgListeners.add(l);
    return () => this.orgListeners.delete(l);
  }

  /** Follow a thread from `afterSeq` (the last seq the caller already shows, read over
   * HTTP: see history.ts). Returns the unfollow. */
  follow(threadId: string, afterSeq: number, l: Listener): () => void {
    return this.followRoom(`thread:${threadId}`, afterSeq, l);
  }

  /** Follow a workflow run's events from `afterSeq` (its `last_seq` read over HTTP). */
  followRun(runId: string, afterSeq: number, l: Listener): () => void {
    return this.followRoom(`run:${runId}`, afterSeq, l);
  }

  private followRoom(room: string, afterSeq: number, l: Listener): () => void {
    let f = this.follows.get(room);
    if (!f) {
      f = { lastSeq: afterSeq, listeners: new Set() };
      this.follows.set(room, f);
      if (this.socket.connected) this.join(room, afterSeq);
    }
    f.listeners.add(l);
    return () => {
      f!.listeners.delete(l);
      if (f!.listeners.size === 0) {
        this.follows.delete(room);
        if (this.socket.connected) this.socket.emit("leave", target(room));
      }
    };
  }

  command(name: string, payload: object): Promise<any> {
    return new Promise((resolve, reject) => {
      if (!this.socket.connected) {
        reject(new Error("Not connected to the server; it will reconnect by itself, then try again."));
        return;
      }
      this.socket.timeout(15000).emit(name, payload, (err: Error | null, ack: any) => {
        if (err) reject(new Error("The server did not answer in time. Try again."));
        else if (!ack?.ok) reject(new Error(ack?.error?.detail ?? "refused"));
        else resolve(ack);
      });
    });
  }

  close(): void {
    this.socket.close();
    window.__atorLive = undefined;
  }
}
