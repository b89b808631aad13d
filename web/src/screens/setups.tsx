// Setups: view; admins create and edit persona, caps (config.caps) and tool policy.
import { useEffect, useState } from "preact/hooks";
import { api, explain, type Who } from "../api";

interface Setup {
  id: string;
  name: string;
  provider: string;
  model: string;
  persona: string;
  config: any;
  tool_policy: any;
  version: number;
}

function parse(label: string, text: string): any {
  try {
    return text.trim() ? JSON.parse(text) : {};
  } catch {
    throw new Error(`${label} is not valid JSON: check quotes and commas.`);
  }
}

function Editor(props: { setup?: Setup; onDone: () => void }) {
  const s = props.setup;
  const [name, setName] = useState(s?.name ?? "");
  const [provider, setProvider] = useState(s?.provider ?? "anthropic");
  const [model, setModel] = useState(s?.model ?? "");
  const [persona, setPersona] = useState(s?.persona ?? "");
  const [config, setConfig] = useState(JSON.stringify(s?.config ?? {}, null, 2));
  const [policy, setPolicy] = useState(JSON.stringify(s?.tool_policy ?? {}, null, 2));
  const [error, setError] = useState("");
  const save = async (e: Event) => {
    e.preventDefault();
    try {
      const body = { name, provider, model, persona, config: parse("Config", config), tool_policy: parse("Tool policy", policy) };
      if (s) await api("PATCH", `/v1/setups/${s.id}`, body);
      else await api("POST", "/v1/setups", body);
      props.onDone();
    } catch (err) {
      setError(explain(err));
    }
  };
  const field = (label: string, value: string, set: (v: string) => void, name: string) => (
    <label>
      {label}
      <input name={name} value={value} onInput={(e) => set((e.target as HTMLInputElement).value)} required />
    </label>
  );
  return (
    <form class="card form" onSubmit={save} data-testid="setup-editor">
      <h3>{s ? `Edit ${s.name}` : "New setup"}</h3>
      {field("Name", name, setName, "name")}
      {field("Provider", provider, setProvider, "provider")}
      {field("Model", model, setModel, "model")}
      <label>
        Persona
        <textarea name="persona" rows={4} value={persona} onInput={(e) => setPersona((e.target as HTMLTextAreaElement).value)} />
      </label>
      <label>
        Config (JSON; caps under "caps", secrets as "secret:NAME")
        <textarea name="config" rows={5} class="mono" value={config} onInput={(e) => setConfig((e.target as HTMLTextAreaElement).value)} />
      </label>
      <label>
        Tool policy (JSON: {'{"allow": [...] | null, "deny": [...]}'})
        <textarea name="tool_policy" rows={3} class="mono" value={policy} onInput={(e) => setPolicy((e.target as HTMLTextAreaElement).value)} />
      </label>
      {error && <p class="error" role="alert">{error}</p>}
      <div class="row">
        <button type="submit">Save</button>
        <button type="button" class="link" onClick={props.onDone}>
          Cancel
        </button>
      </div>
    </form>
  );
}

export function Setups(props: { who: Who }) {
  const [setups, setSetups] = useState<Setup[] | null>(null);
  const [editing, setEditing] = useState<Setup | "new" | null>(null);
  const [error, setError] = useState("");
  const load = () =>
    api<{ data: Setup[] }>("GET", "/v1/setups")
      .then((r) => setSetups(r.data))
      .catch((e) => setError(explain(e)));
  useEffect(() => {
    load();
  }, []);
  const admin = props.who.role === "admin";
  return (
    <section>
      <div class="row">
        <h2 class="grow">Setups</h2>
        {admin && !editing && <button onClick={() => setEditing("new")}>New setup</button>}
      </div>
      {!admin && <p class="muted">Only admins can create or edit setups.</p>}
      {error && <p class="error">{error}</p>}
      {editing && (
        <Editor
          setup={editing === "new" ? undefined : editing}
          onDone={() => {
            setEditing(null);
            load();
          }}
        />
      )}
      <div class="cards">
        {(setups ?? []).map((s) => (
          <div class="card" data-testid="setup">
            <div class="row">
              <strong class="grow">{s.name}</strong>
              <span class="muted small">v{s.version}</span>
              {admin && (
                <button class="link" onClick={() => setEditing(s)}>
                  Edit
                </button>
              )}
            </div>
            <div class="muted small">
              {s.provider} · {s.model}
            </div>
            {s.persona && <p class="persona">{s.persona}</p>}
            <div class="small">
              caps: <code>{JSON.stringify(s.config?.caps ?? {})}</code>
            </div>
            <div class="small">
              tools: <code>{JSON.stringify(s.tool_policy ?? {})}</code>
            </div>
          </div>
        ))}
      </div>
      {setups && setups.length === 0 && <p class="muted">No setups yet.</p>}
    </section>
  );
}
