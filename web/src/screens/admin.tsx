// Secrets (names only: values go in and never come back) and API keys (shown once).
import { useEffect, useState } from "preact/hooks";
import { api, explain, type Who } from "../api";

export function Secrets(_props: { who: Who }) {
  const [names, setNames] = useState<string[]>([]);
  const [name, setName] = useState("");
  const [value, setValue] = useState("");
  const [error, setError] = useState("");
  const load = () =>
    api<{ data: { name: string }[] }>("GET", "/v1/secrets")
      .then((r) => setNames(r.data.map((x) => x.name)))
      .catch((e) => setError(explain(e)));
  useEffect(() => {
    load();
  }, []);
  const save = async (e: Event) => {
    e.preventDefault();
    try {
      await api("PUT", `/v1/secrets/${encodeURIComponent(name)}`, { value });
      setName("");
      setValue("");
      setError("");
      load();
    } catch (err) {
      setError(explain(err));
    }
  };
  const remove = async (n: string) => {
    if (!confirm(`Delete the secret ${n}? Setups that use it stop working.`)) return;
    try {
      await api("DELETE", `/v1/secrets/${encodeURIComponent(n)}`);
      load();
    } catch (err) {
      setError(explain(err));
    }
  };
  return (
    <section>
      <h2>Secrets</h2>
      <p class="muted">Values are encrypted on the server and never shown again. Refer to one in a setup's config as "secret:NAME".</p>
      {error && <p class="error">{error}</p>}
      <form class="card row wrap" onSubmit={save}>
        <input placeholder="NAME" value={name} pattern="[A-Za-z0-9_.\-]{1,100}" required onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        <input type="password" placeholder="value" value={value} required onInput={(e) => setValue((e.target as HTMLInputElement).value)} />
        <button type="submit">Save secret</button>
      </form>
      <ul class="list" data-testid="secrets">
        {names.map((n) => (
          <li class="row">
            <code class="grow">{n}</code>
            <button class="link danger" onClick={() => remove(n)}>
              Delete
            </button>
          </li>
        ))}
        {names.length === 0 && <li class="muted">No secrets.</li>}
      </ul>
    </section>
  );
}

export function Keys(props: { who: Who }) {
  const [keys, setKeys] = useState<any[]>([]);
  const [name, setName] = useState("");
  const [email, setEmail] = useState("");
  const [role, setRole] = useState("member");
  const [created, setCreated] = useState<string | null>(null);
  const [error, setError] = useState("");
  const load = () =>
    api<{ data: any[] }>("GET", "/v1/api-keys")
      .then((r) => setKeys(r.data))
      .catch((e) => setError(explain(e)));
  useEffect(() => {
    load();
  }, []);
  const create = async (e: Event) => {
    e.preventDefault();
    try {
      const k = await api<any>("POST", "/v1/api-keys", { name, email, role });
      setCreated(k.key);
      // A new form for the next key: nothing of this one's stays (its email included).
      setName("");
      setEmail("");
      setRole("member");
      setError("");
      load();
    } catch (err) {
      setError(explain(err));
    }
  };
  const revoke = async (id: string) => {
    if (!confirm("Revoke this key? Programs and console sessions using it stop working.")) return;
    try {
      await api("DELETE", `/v1/api-keys/${id}`);
      load();
    } catch (err) {
      setError(explain(err));
    }
  };
  return (
    <section>
      <h2>API keys</h2>
      {error && <p class="error">{error}</p>}
      {created && (
        <div class="card notice">
          New key, shown once — copy it now: <code data-testid="new-key">{created}</code>
          <button class="link" onClick={() => setCreated(null)}>
            Done
          </button>
        </div>
      )}
      <form class="card row wrap" onSubmit={create}>
        <input name="key_name" placeholder="key name" value={name} required onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        <input name="email" placeholder="user email" type="email" value={email} required onInput={(e) => setEmail((e.target as HTMLInputElement).value)} />
        <select name="role" value={role} onChange={(e) => setRole((e.target as HTMLSelectElement).value)}>
          <option>viewer</option>
          <option>member</option>
          <option>admin</option>
        </select>
        <button type="submit">Create key</button>
      </form>
      <div class="scroll-x">
        <table data-testid="keys">
          <thead>
            <tr>
              <th>Name</th>
              <th>Prefix</th>
              <th>Role</th>
              <th>Last used</th>
              <th></th>
            </tr>
          </thead>
          <tbody>
            {keys.map((k) => (
              <tr class={k.revoked_at ? "muted" : ""}>
                <td>{k.name}</td>
                <td>
                  <code>ator_{k.prefix}_…</code>
                </td>
                <td>{k.role}</td>
                <td>{k.last_used_at ? new Date(k.last_used_at).toLocaleString() : "never"}</td>
                <td>
                  {k.revoked_at ? (
                    "revoked"
                  ) : k.id === props.who.key_id ? (
                    <span class="muted">this session's key</span>
                  ) : (
                    <button class="link danger" onClick={() => revoke(k.id)}>
                      Revoke
                    </button>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}
