// The ator console: log in with an API key (exchanged for an HttpOnly session cookie), then
// threads, chat (with the inspector, instructions and the subagent tree), workflow runs (drawn
// live as a graph), approvals, usage, analyses, setups, secrets, keys, the org's documents, the
// org policy and webhooks (outbound and inbound). Live state arrives over one socket. Single
// sign-on (screens/login.tsx) lands here too; its sessions are refreshed at the identity
// provider on load and then halfway to each expiry, so a person it disabled is signed out.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { api, ApiError, explain, setCsrf, type Refreshed, type Who } from "./api";
import { Live } from "./live";
import { loadMarkdown } from "./markdown";
import { Link, navigate, usePath } from "./router";
import { Login } from "./screens/login";
import { Threads } from "./screens/threads";
import { Chat } from "./screens/chat";
import { Usage } from "./screens/usage";
import { Analyses } from "./screens/analyses";
import { GatewayCalls } from "./screens/gateway";
import { Setups } from "./screens/setups";
import { Secrets, Keys } from "./screens/admin";
import { Policy } from "./screens/prompts";
import { RunView, Runs } from "./screens/runs";
import { Approvals } from "./screens/approvals";
import { Webhooks } from "./screens/webhooks";
import { InboundHooks } from "./screens/inbound";
import { Documents } from "./screens/documents";
import "./screens/inspector"; // registers the footer action
import "./screens/tree"; // registers the thread tab
import "./screens/voice"; // registers the voice tab and the play action
import "./style.css";

function App() {
  const [who, setWho] = useState<Who | null | undefined>(undefined);
  const [live, setLive] = useState<Live | null>(null);
  const [status, setStatus] = useState<Live["status"]>("connecting");
  const [ended, setEnded] = useState("");
  const path = usePath();

  useEffect(() => {
    const onEnded = (e: Event) => {
      setEnded((e as CustomEvent<string>).detail);
      setCsrf(null);
      setWho(null);
    };
    window.addEventListener("ator:session-ended", onEnded);
    return () => window.removeEventListener("ator:session-ended", onEnded);
  }, []);

  useEffect(() => {
    api<Who>("GET", "/v1/sessions/current")
      .then(async (w) => {
        setCsrf(w.csrf_token);
        if (!w.sso) return w;
        // Asked again at the identity provider before anything else: a reload by a person
        // it disabled is signed out now, not at the session's end.
        const r = await api<Refreshed>("POST", "/v1/sessions/refresh");
        setCsrf(r.csrf_token);
        return { ...w, ...r };
      })
      .then(setWho)
      .catch((e) => {
        setCsrf(null);
        setEnded(e instanceof ApiError && e.code === "sso_refused" ? explain(e) : "");
        setWho(null);
      });
  }, []);

  useEffect(() => {
    if (!who?.sso || !who.expires_at || !live) return;
    let expires = who.expires_at;
    let timer = 0;
    let stopped = false;
    const schedule = (ms: number) => (timer = window.setTimeout(refresh, ms));
    const refresh = async () => {
      try {
        const r = await api<Refreshed>("POST", "/v1/sessions/refresh");
        if (stopped) return;
        setCsrf(r.csrf_token);
        live.setCsrf(r.csrf_token); // the socket's reconnects authenticate the new session
        expires = r.expires_at;
        schedule(halfway(expires));
      } catch (e) {
        if (stopped) return;
        if (e instanceof ApiError && e.status === 401) {
          window.dispatchEvent(new CustomEvent("ator:session-ended", { detail: explain(e) }));
        } else {
          schedule(Math.min(30_000, halfway(expires))); // the server was not reachable: again
        }
      }
    };
    schedule(halfway(expires));
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [who, live]);

  useEffect(() => {
    if (!who?.csrf_token) return;
    loadMarkdown(); // logged in: replies will want it
    const l = new Live(who.csrf_token);
    setLive(l);
    const off = l.onStatus(setStatus);
    return () => {
      off();
      l.close();
    };
  }, [who]);

  if (who === undefined) return <div class="center muted">Loading…</div>;
  if (who === null || !who.csrf_token)
    return (
      <Login
        notice={ended}
        onLogin={(w) => {
          setEnded("");
          setCsrf(w.csrf_token);
          setWho(w);
          if (path === "/login") navigate("/");
        }}
      />
    );

  const logout = async () => {
    try {
      await api("DELETE", "/v1/sessions/current");
    } catch (e) {
      alert(explain(e));
    }
    setCsrf(null);
    setWho(null);
  };

  let screen;
  let m: RegExpMatchArray | null;
  if (!live) screen = <div class="muted">Connecting…</div>;
  else if ((m = path.match(/^\/threads\/([0-9a-f-]{36})/))) screen = <Chat key={m[1]} threadId={m[1]} live={live} who={who} />;
  else if ((m = path.match(/^\/runs\/([0-9a-f-]{36})/))) screen = <RunView key={m[1]} runId={m[1]} live={live} />;
  else if (path.startsWith("/runs")) screen = <Runs />;
  else if (path.startsWith("/usage")) screen = <Usage />;
  else if (path.startsWith("/analyses")) screen = <Analyses />;
  else if (path.startsWith("/setups")) screen = <Setups who={who} />;
  else if (path.startsWith("/secrets")) screen = <Secrets who={who} />;
  else if (path.startsWith("/keys")) screen = <Keys who={who} />;
  else if (path.startsWith("/policy")) screen = <Policy who={who} />;
  else if (path.startsWith("/approvals")) screen = <Approvals live={live} who={who} />;
  else if (path.startsWith("/webhooks/inbound")) screen = <InboundHooks who={who} />;
  else if (path.startsWith("/webhooks")) screen = <Webhooks who={who} />;
  else if (path.startsWith("/documents")) screen = <Documents who={who} />;
  else if (path.startsWith("/gateway") && who.role === "admin") screen = <GatewayCalls />;
  else screen = <Threads live={live} who={who} />;

  const nav = (to: string, label: string) => (
    <Link to={to} class={path === to || (to !== "/" && path.startsWith(to)) ? "active" : ""}>
      {label}
    </Link>
  );
  return (
    <div class="shell">
      <header>
        <strong class="brand">ator</strong>
        <nav>
          {nav("/", "Threads")}
          {nav("/runs", "Runs")}
          {nav("/approvals", "Approvals")}
          {nav("/usage", "Usage")}
          {nav("/setups", "Setups")}
          {who.role === "admin" && nav("/secrets", "Secrets")}
          {who.role === "admin" && nav("/keys", "API keys")}
          {nav("/documents", "Documents")}
          {nav("/policy", "Policy")}
          {nav("/webhooks", "Webhooks")}
          {who.role === "admin" && nav("/gateway", "MCP calls")}
        </nav>
        <span class={`conn ${status}`} data-testid="connection" title="live connection">
          {status === "live" ? "● live" : status === "offline" ? "○ reconnecting" : "○ connecting"}
        </span>
        <span class="muted small" data-testid="role" title="your role in this org">
          {who.role}
        </span>
        <button class="link" onClick={logout} data-testid="logout">
          Log out
        </button>
      </header>
      <main>{screen}</main>
    </div>
  );
}

// Milliseconds to halfway between now and `expires` (at least one second).
function halfway(expires: string): number {
  return Math.max(1000, (Date.parse(expires) - Date.now()) / 2);
}

render(<App />, document.getElementById("app")!);
