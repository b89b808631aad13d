// The org's documents (GET/POST /v1/documents, GET/DELETE /v1/documents/{id}, POST
// /v1/documents/{id}/versions): upload text or markdown (typed or read from a .md/.txt file),
// open one to read its current version and save a new one (with `expected_version`, so an
// edit made on a stale copy is refused and explained), delete. Below, a search box that asks
// what `search_docs` would answer (GET /v1/knowledge/search) and the queries no document
// answered (GET /v1/knowledge/queries?answered=false). Viewers read; members write.
import { useEffect, useState } from "preact/hooks";
import { api, ApiError, explain, type Who } from "../api";

interface Doc {
  id: string;
  title: string;
  content_type: string;
  version: number;
  updated_at: string;
  text?: string;
  chunks?: number;
}

interface Snippet {
  document_id: string;
  version: number;
  title: string;
  section: string;
  text: string;
}

interface LoggedQuery {
  id: string;
  query: string;
  origin: string;
  created_at: string;
}

function Editor(props: { id: string; canEdit: boolean; onChanged: (deleted: boolean) => void }) {
  const [doc, setDoc] = useState<Doc | null>(null);
  const [text, setText] = useState("");
  const [error, setError] = useState("");
  const [saved, setSaved] = useState("");
  const load = () =>
    api<Doc>("GET", `/v1/documents/${props.id}`)
      .then((d) => {
        setDoc(d);
        setText(d.text ?? "");
        setError("");
      })
      .catch((e) => setError(explain(e)));
  useEffect(() => {
    setSaved("");
    load();
  }, [props.id]);
  if (!doc) return error ? <p class="error">{error}</p> : <p class="muted">Loading…</p>;
  const save = async (e: Event) => {
    e.preventDefault();
    try {
      const d = await api<Doc>("POST", `/v1/documents/${doc.id}/versions`, { text, expected_version: doc.version });
      setSaved(`Saved as version ${d.version}. Searches read only this version from now on.`);
      setError("");
      await load();
      props.onChanged(false);
    } catch (err) {
      if (err instanceof ApiError && err.status === 409)
        setError(`Someone saved another version since you opened version ${doc.version}. Your text was not saved (it is still below); reload the document and make your edit again.`);
      else setError(explain(err));
    }
  };
  const remove = async () => {
    if (!confirm(`Delete "${doc.title}" and every version of it?`)) return;
    try {
      await api("DELETE", `/v1/documents/${doc.id}`);
      props.onChanged(true);
    } catch (err) {
      setError(explain(err));
    }
  };
  return (
    <form class="form card" onSubmit={save} data-testid="document">
      <div class="row wrap">
        <strong class="grow">{doc.title}</strong>
        <span class="muted small">
          version {doc.version} · {doc.chunks} chunk{doc.chunks === 1 ? "" : "s"} · {doc.content_type}
        </span>
      </div>
      {error && <p class="error">{error}</p>}
      {saved && <p class="notice">{saved}</p>}
      <textarea rows={14} value={text} readOnly={!props.canEdit} onInput={(e) => setText((e.target as HTMLTextAreaElement).value)} data-testid="document-text" />
      {props.canEdit && (
        <div class="row">
          <button type="submit" disabled={text === doc.text}>
            Save as version {doc.version + 1}
          </button>
          <button type="button" class="link" onClick={load}>
            Reload
          </button>
          <button type="button" class="link danger" onClick={remove}>
            Delete
          </button>
        </div>
      )}
    </form>
  );
}

function Search() {
  const [q, setQ] = useState("");
  const [found, setFound] = useState<{ mode: string; data: Snippet[] } | null>(null);
  const [error, setError] = useState("");
  const run = async (e: Event) => {
    e.preventDefault();
    try {
      setFound(await api("GET", `/v1/knowledge/search?q=${encodeURIComponent(q)}`));
      setError("");
    } catch (err) {
      setError(explain(err));
    }
  };
  return (
    <div class="card">
      <form class="row" onSubmit={run}>
        <input class="grow" placeholder="Ask what search_docs would find" value={q} maxLength={1000} onInput={(e) => setQ((e.target as HTMLInputElement).value)} data-testid="search-query" />
        <button type="submit" disabled={!q.trim()}>
          Search
        </button>
      </form>
      {error && <p class="error">{error}</p>}
      {found && (
        <ol class="list" data-testid="search-results">
          {found.data.map((s) => (
            <li>
              <strong>{s.title}</strong> <span class="muted small">v{s.version}{s.section ? ` · ${s.section}` : ""}</span>
              <div class="small">{s.text.slice(0, 300)}</div>
            </li>
          ))}
          {found.data.length === 0 && <li class="muted">No document answers this; it is listed below as unanswered.</li>}
        </ol>
      )}
      {found && <p class="muted small">Ranking: {found.mode === "hybrid" ? "keywords and meaning" : found.mode === "bm25" ? "keywords only (this database has no vector search)" : found.mode}</p>}
    </div>
  );
}

export function Documents(props: { who: Who }) {
  const canEdit = props.who.role !== "viewer";
  const [docs, setDocs] = useState<Doc[]>([]);
  const [cursor, setCursor] = useState<string | null>(null);
  const [open, setOpen] = useState<string | null>(null);
  const [unanswered, setUnanswered] = useState<LoggedQuery[]>([]);
  const [title, setTitle] = useState("");
  const [text, setText] = useState("");
  const [type, setType] = useState("text/markdown");
  const [error, setError] = useState("");
  const load = async (after?: string | null) => {
    try {
      const page = await api<{ data: Doc[]; next_cursor: string | null }>("GET", `/v1/documents?limit=50${after ? `&cursor=${encodeURIComponent(after)}` : ""}`);
      setDocs((d) => (after ? [...d, ...page.data] : page.data));
      setCursor(page.next_cursor);
      const q = await api<{ data: LoggedQuery[] }>("GET", "/v1/knowledge/queries?answered=false&limit=20");
      setUnanswered(q.data);
      setError("");
    } catch (e) {
      setError(explain(e));
    }
  };
  useEffect(() => {
    load();
  }, []);
  const readFile = async (e: Event) => {
    const file = (e.target as HTMLInputElement).files?.[0];
    if (!file) return;
    setText(await file.text());
    if (!title) setTitle(file.name.replace(/\.(md|markdown|txt)$/i, ""));
    setType(/\.txt$/i.test(file.name) ? "text/plain" : "text/markdown");
  };
  const upload = async (e: Event) => {
    e.preventDefault();
    try {
      const d = await api<Doc>("POST", "/v1/documents", { title, text, content_type: type });
      setTitle("");
      setText("");
      setOpen(d.id);
      await load();
    } catch (err) {
      setError(explain(err));
    }
  };
  return (
    <section>
      <h2>Documents</h2>
      <p class="muted">Agents read these through the search_docs tool, as quoted data. A new version replaces the old one in every search.</p>
      {error && <p class="error">{error}</p>}
      {canEdit && (
        <form class="form card" onSubmit={upload} data-testid="upload">
          <div class="row wrap">
            <input class="grow" placeholder="Title" value={title} maxLength={500} onInput={(e) => setTitle((e.target as HTMLInputElement).value)} data-testid="upload-title" />
            <select value={type} onChange={(e) => setType((e.target as HTMLSelectElement).value)}>
              <option value="text/markdown">Markdown</option>
              <option value="text/plain">Plain text</option>
            </select>
            <input type="file" accept=".md,.markdown,.txt,text/plain,text/markdown" onChange={readFile} />
          </div>
          <textarea rows={6} placeholder="Text, or choose a file" value={text} onInput={(e) => setText((e.target as HTMLTextAreaElement).value)} data-testid="upload-text" />
          <button type="submit" class="right" disabled={!title.trim() || !text.trim()}>
            Upload
          </button>
        </form>
      )}
      <ul class="list" data-testid="documents">
        {docs.map((d) => (
          <li class="row">
            <button class="link grow" style={{ textAlign: "left" }} onClick={() => setOpen(open === d.id ? null : d.id)}>
              {d.title}
            </button>
            <span class="muted small">
              v{d.version} · {new Date(d.updated_at).toLocaleString()}
            </span>
          </li>
        ))}
        {docs.length === 0 && <li class="muted">No documents yet.</li>}
      </ul>
      {cursor && (
        <button class="link" onClick={() => load(cursor)}>
          More
        </button>
      )}
      {open && (
        <Editor
          key={open}
          id={open}
          canEdit={canEdit}
          onChanged={(deleted) => {
            if (deleted) setOpen(null);
            load();
          }}
        />
      )}
      <h3>Search</h3>
      <Search />
      <h3>Unanswered queries</h3>
      <ul class="list" data-testid="unanswered">
        {unanswered.map((q) => (
          <li class="row">
            <span class="grow">{q.query}</span>
            <span class="muted small">
              {q.origin} · {new Date(q.created_at).toLocaleString()}
            </span>
          </li>
        ))}
        {unanswered.length === 0 && <li class="muted">Every query found a document.</li>}
      </ul>
    </section>
  );
}
