// The editable prompt layers: the org policy (a settings screen, admins edit; GET/PUT
// /v1/org/policy) and a thread's instructions (a tab of the chat screen, members edit;
// GET/PUT /v1/threads/{id}/instructions). Each shows the version in force and saves with
// `if_version`, so an edit made on a stale copy is refused (409) and explained, never
// silently overwrites someone else's.
import { useEffect, useState } from "preact/hooks";
import { api, ApiError, explain, type Who } from "../api";
import { registerThreadTab } from "../panels";

interface LayerText {
  layer: string;
  text: string;
  version: number;
  replace?: boolean;
}

function LayerEditor(props: { path: string; canEdit: boolean; who: string; withReplace: boolean; testid: string }) {
  const [layer, setLayer] = useState<LayerText | null>(null);
  const [text, setText] = useState("");
  const [replace, setReplace] = useState(false);
  const [error, setError] = useState("");
  const [saved, setSaved] = useState("");
  const [stale, setStale] = useState(false);

  const load = () =>
    api<LayerText>("GET", props.path)
      .then((l) => {
        setLayer(l);
        setText(l.text);
        setReplace(!!l.replace);
        setStale(false);
        setError("");
      })
      .catch((e) => setError(explain(e)));
  useEffect(() => {
    load();
  }, [props.path]);

  const save = async (e: Event) => {
    e.preventDefault();
    if (!layer) return;
    setSaved("");
    try {
      const body: any = { text, if_version: layer.version };
      if (props.withReplace) body.replace = replace;
      const l = await api<LayerText>("PUT", props.path, body);
      setLayer(l);
      setError("");
      setSaved(`Saved as version ${l.version}. Turns that start from now on use it.`);
    } catch (err) {
      if (err instanceof ApiError && err.status === 409) {
        setStale(true);
        setError(
          `Someone else changed this since you opened it (you edited version ${layer.version}). ` +
            "Your text was not saved (it is still below: copy it if you need it), then load the current version and make your edit again.",
        );
      } else setError(explain(err));
    }
  };

  if (!layer && !error) return <p class="muted">Loading…</p>;
  return (
    <form class="form card" onSubmit={save} data-testid={props.testid} data-version={layer?.version ?? ""}>
      <div class="row wrap">
        <strong class="grow">Version {layer?.version ?? "?"}</strong>
        {!props.canEdit && <span class="muted small">Only {props.who} can edit this.</span>}
      </div>
      <textarea
        name="text"
        rows={8}
        value={text}
        disabled={!props.canEdit}
        onInput={(e) => setText((e.target as HTMLTextAreaElement).value)}
      />
      {props.withReplace && (
        <label class="inline">
          <input
            type="checkbox"
            name="replace"
            checked={replace}
            disabled={!props.canEdit}
            onChange={(e) => setReplace((e.target as HTMLInputElement).checked)}
          />
          &nbsp;Replace ator's core instructions (the rule that tool output is data is kept)
        </label>
      )}
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      {saved && <p class="notice small" data-testid="saved">{saved}</p>}
      {props.canEdit && (
        <div class="row">
          <button type="submit" disabled={!layer || stale}>
            Save
          </button>
          {stale && (
            <button type="button" class="link" onClick={load} data-testid="reload-layer">
              Load the current version
            </button>
          )}
        </div>
      )}
    </form>
  );
}

export function Policy(props: { who: Who }) {
  return (
    <section>
      <h2>Org policy</h2>
      <p class="muted small">
        A prompt layer every turn of the org gets after ator's core instructions. Changing it breaks the prompt cache of
        every thread once (the inspector shows it as "org policy changed").
      </p>
      <LayerEditor path="/v1/org/policy" canEdit={props.who.role === "admin"} who="admins" withReplace testid="policy" />
    </section>
  );
}

function Instructions(props: { threadId: string; who: Who }) {
  return (
    <section>
      <p class="muted small">Instructions for this thread only, sent with every turn after the setup's persona.</p>
      <LayerEditor
        path={`/v1/threads/${props.threadId}/instructions`}
        canEdit={props.who.role !== "viewer"}
        who="members and admins"
        withReplace={false}
        testid="instructions"
      />
    </section>
  );
}

registerThreadTab({ id: "instructions", label: "Instructions", component: Instructions });
