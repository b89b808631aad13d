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
    <div class="center">
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
    </div>
  );
}
