// Setups: view; admins create and edit them. The form offers the providers and models of the
// catalog (GET /v1/catalog/models: prices ator bills and the window it plans for), says what
// each field does, and keeps the endpoint and key of a hosted provider in fields of their
// own (merged into config on save).
import { useEffect, useState } from "preact/hooks";
import { api, ApiError, explain, type Who } from "../api";
import { Link } from "../router";

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

interface ModelInfo {
  id: string;
  name: string;
  context_window: number | null; // the catalog's
  planned_window: number; // what a turn plans compaction for
  price: { input_mtok: string; output_mtok: string; cache_read_mtok: string; cache_write_mtok: string } | null;
}

interface ProviderInfo {
  id: string;
  label: string;
  server_key: boolean;
  models: ModelInfo[];
}

const HOSTED = new Set(["anthropic", "openai"]);
const OTHER = "";

function parse(label: string, text: string): any {
  try {
    return text.trim() ? JSON.parse(text) : {};
  } catch {
    throw new Error(`${label} is not valid JSON: check quotes and commas.`);
  }
}

const usd = (v: string) => `$${Number(v)}`;
const tokens = (n: number) => (n >= 1_000_000 ? `${+(n / 1_000_000).toFixed(2)}M` : `${Math.round(n / 1000)}k`);

function priceWords(m: ModelInfo): string {
  if (!m.price) return "unpriced: its calls record $0 and are flagged";
  const p = m.price;
  if (Number(p.input_mtok) === 0 && Number(p.output_mtok) === 0) return "free (runs in-process)";
  return `${usd(p.input_mtok)} in / ${usd(p.output_mtok)} out per million tokens · cache ${usd(p.cache_read_mtok)} read / ${usd(p.cache_write_mtok)} write`;
}

function ModelFacts(props: { model: string; known: ModelInfo | undefined }) {
  if (!props.model) return null;
  if (!props.known)
    return (
      <p class="hint" data-testid="model-facts">
        Not in the catalog: its calls record $0 and are flagged unpriced unless the operator prices it; the window is
        ator's default unless config sets <code>context_window</code>.
      </p>
    );
  const m = props.known;
  const window = m.context_window ?? m.planned_window;
  return (
    <p class="hint" data-testid="model-facts">
      {priceWords(m)} · reads {tokens(window)} tokens at once
      {m.planned_window !== window && ` (ator compacts at ${tokens(m.planned_window)}; config "context_window" changes that)`}
    </p>
  );
}

function Editor(props: { setup?: Setup; catalog: ProviderInfo[]; onDone: () => void }) {
  const s = props.setup;
  const { base_url: savedUrl, api_key: savedKey, ...rest } = s?.config ?? {};
  const [name, setName] = useState(s?.name ?? "");
  const [provider, setProvider] = useState(s?.provider ?? props.catalog[0]?.id ?? "anthropic");
  const [model, setModel] = useState(s?.model ?? "");
  const [baseUrl, setBaseUrl] = useState<string>(typeof savedUrl === "string" ? savedUrl : "");
  const [apiKey, setApiKey] = useState<string>(typeof savedKey === "string" ? savedKey : "");
  const [persona, setPersona] = useState(s?.persona ?? "");
  const [config, setConfig] = useState(JSON.stringify(rest, null, 2));
  const [policy, setPolicy] = useState(JSON.stringify(s?.tool_policy ?? {}, null, 2));
  const [error, setError] = useState("");
  const [toSecrets, setToSecrets] = useState(false);

  const info = props.catalog.find((p) => p.id === provider);
  const known = info?.models.find((m) => m.id === model);
  const hosted = HOSTED.has(provider);
  const providers = info || !provider ? props.catalog : [...props.catalog, { id: provider, label: provider, server_key: false, models: [] }];

  const pickProvider = (id: string) => {
    setProvider(id);
    const models = props.catalog.find((p) => p.id === id)?.models ?? [];
    if (!models.some((m) => m.id === model)) setModel(models.length === 1 ? models[0].id : "");
  };

  const save = async (e: Event) => {
    e.preventDefault();
    try {
      const cfg = parse("Config", config);
      if (hosted && baseUrl.trim()) cfg.base_url = baseUrl.trim();
      if (hosted && apiKey.trim()) cfg.api_key = apiKey.trim();
      const body = { name, provider, model, persona, config: cfg, tool_policy: parse("Tool policy", policy) };
      if (s) await api("PATCH", `/v1/setups/${s.id}`, body);
      else await api("POST", "/v1/setups", body);
      props.onDone();
    } catch (err) {
      setError(explain(err));
      setToSecrets(err instanceof ApiError && err.code === "secret_in_config");
    }
  };
  const input = (e: Event) => (e.target as HTMLInputElement).value;
  return (
    <form class="card form" onSubmit={save} data-testid="setup-editor">
      <h3>{s ? `Edit ${s.name}` : "New setup"}</h3>
      <label>
        Name
        <input name="name" value={name} onInput={(e) => setName(input(e))} required />
        <span class="hint">What people pick when they start a thread.</span>
      </label>
      <label>
        Provider
        <select name="provider" value={provider} onChange={(e) => pickProvider(input(e))}>
          {providers.map((p) => (
            <option value={p.id}>{p.label}</option>
          ))}
        </select>
        <span class="hint">Who runs the model. Anthropic and OpenAI-compatible servers (vLLM, llama.cpp, Ollama) are called over HTTP; local runs the packaged small model in ator itself; scripted plays a fixed script (tests, demos).</span>
      </label>
      <label>
        Model
        {info && info.models.length > 0 && (
          <select name="model_choice" value={known ? model : OTHER} onChange={(e) => input(e) !== OTHER && setModel(input(e))}>
            {info.models.map((m) => (
              <option value={m.id}>
                {m.name !== m.id ? `${m.name} (${m.id})` : m.id}
                {m.price ? ` — ${usd(m.price.input_mtok)} / ${usd(m.price.output_mtok)} per MTok` : ""} ·{" "}
                {tokens(m.context_window ?? m.planned_window)}
              </option>
            ))}
            <option value={OTHER}>Another model: type its id below</option>
          </select>
        )}
        <input name="model" value={model} onInput={(e) => setModel(input(e))} placeholder="model id" required />
        <ModelFacts model={model} known={known} />
      </label>
      {hosted && (
        <>
          <label>
            Endpoint (base_url, optional)
            <input name="base_url" value={baseUrl} onInput={(e) => setBaseUrl(input(e))} placeholder={provider === "openai" ? "https://my-server.example/v1" : "https://my-proxy.example"} />
            <span class="hint" data-testid="base-url-hint">
              Leave empty to use this server's {info?.label ?? provider} endpoint
              {info?.server_key
                ? ", with the key its operator configured."
                : ". This server has no key for it yet: ask its operator for one, or name your own endpoint here with its key."}{" "}
              A setup with its own endpoint never gets the server's key.
            </span>
          </label>
          <label>
            API key (optional)
            <input name="api_key" value={apiKey} onInput={(e) => setApiKey(input(e))} placeholder="secret:NAME" />
            <span class="hint">
              A reference to a secret saved on the <Link to="/secrets">Secrets</Link> screen, as <code>secret:NAME</code> — never the key itself. Leave
              empty with the server's endpoint, or for a server that needs no key.
            </span>
          </label>
        </>
      )}
      <label>
        Persona
        <textarea name="persona" rows={4} value={persona} onInput={(e) => setPersona((e.target as HTMLTextAreaElement).value)} />
        <span class="hint">The setup's part of the system prompt: who the agent is and how it answers.</span>
      </label>
      <label>
        Config (JSON)
        <textarea name="config" rows={5} class="mono" value={config} onInput={(e) => setConfig((e.target as HTMLTextAreaElement).value)} />
        <span class="hint">
          Everything else: caps under <code>"caps"</code> (e.g. <code>{'{"max_steps": 20}'}</code>), <code>context_window</code>,{" "}
          <code>timeout</code>, <code>headers</code>; a scripted setup's <code>"script"</code>. Secrets only as <code>"secret:NAME"</code>.
        </span>
      </label>
      <label>
        Tool policy (JSON)
        <textarea name="tool_policy" rows={3} class="mono" value={policy} onInput={(e) => setPolicy((e.target as HTMLTextAreaElement).value)} />
        <span class="hint">
          Which tools the agent may call: <code>{'{"allow": [...] | null, "deny": [...]}'}</code> (null allows every tool not denied).
        </span>
      </label>
      {error && (
        <p class="error" role="alert">
          {error}
          {toSecrets && (
            <>
              {" "}
              <Link to="/secrets" testid="to-secrets">
                Open the Secrets screen
              </Link>
            </>
          )}
        </p>
      )}
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
  const [catalog, setCatalog] = useState<ProviderInfo[]>([]);
  const load = () =>
    api<{ data: Setup[] }>("GET", "/v1/setups")
      .then((r) => setSetups(r.data))
      .catch((e) => setError(explain(e)));
  useEffect(() => {
    load();
    api<{ data: ProviderInfo[] }>("GET", "/v1/catalog/models")
      .then((r) => setCatalog(r.data))
      .catch((e) => setError(explain(e)));
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
          catalog={catalog}
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
