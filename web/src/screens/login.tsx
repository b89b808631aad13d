import { useState } from "preact/hooks";
import { api, ApiError, explain, type Who } from "../api";

export function Login(props: { onLogin: (w: Who) => void; notice?: string }) {
  const [key, setKey] = useState("");
  const [error, setError] = useState(props.notice ?? "");
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError("");
    try {
      const w = await api<Who>("POST", "/v1/sessions", { key: key.trim() });
      setKey(""); // the key is not kept anywhere once exchanged
      props.onLogin(w);
    } catch (err) {
      // A refused key is not an ended session: say what the server said about the key.
      setError(err instanceof ApiError && err.status === 401 ? err.message : explain(err));
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="center column">
      <form class="card login" onSubmit={submit}>
        <h1>ator</h1>
        <p class="muted">Log in with an API key. It is exchanged for a session cookie and not stored in this browser.</p>
        <label>
          API key
          <input
            type="password"
            name="key"
            autocomplete="off"
            placeholder="ator_…"
            value={key}
            onInput={(e) => setKey((e.target as HTMLInputElement).value)}
            required
          />
        </label>
        {error && <p class="error" role="alert">{error}</p>}
        <button type="submit" disabled={busy || !key.trim()}>
          {busy ? "Logging in…" : "Log in"}
        </button>
      </form>
      <SingleSignOn />
    </div>
  );
}

const ORG_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

// Single sign-on: the browser goes to the org's identity provider (GET /v1/sso/{org}/login)
// and comes back signed in. The org is named by its id, prefilled from `?org=` (the link an
// admin shares: GET /v1/org/sso's login_url, or /ui/?org=<id>).
function SingleSignOn() {
  const [org, setOrg] = useState(new URLSearchParams(location.search).get("org") ?? "");
  const id = org.trim();
  return (
    <form
      class="card login"
      data-testid="sso"
      onSubmit={(e) => {
        e.preventDefault();
        location.assign(`/v1/sso/${encodeURIComponent(id)}/login`);
      }}
    >
      <p class="muted">Or sign in with your organization's identity provider.</p>
      <label>
        Organization ID
        <input
          name="org"
          autocomplete="organization"
          placeholder="00000000-0000-0000-0000-000000000000"
          value={org}
          onInput={(e) => setOrg((e.target as HTMLInputElement).value)}
          required
        />
      </label>
      <button type="submit" disabled={!ORG_ID.test(id)}>
        Sign in with SSO
      </button>
    </form>
  );
}
