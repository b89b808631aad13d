// Voice: a thread tab that turns voice mode on or off (PUT /v1/threads/{id}/voice: the voice
// layer joins the prompt of the next turns) and a turn footer action that plays the turn's
// reply (GET /v1/threads/{id}/speech?turn_id=…, streamed audio, the session cookie).
import { useEffect, useState } from "preact/hooks";
import { api, explain } from "../api";
import { registerThreadTab, registerTurnAction } from "../panels";

function VoiceTab(props: { threadId: string }) {
  const [voice, setVoice] = useState<boolean | null>(null);
  const [error, setError] = useState<string | null>(null);
  useEffect(() => {
    api<{ voice: boolean }>("GET", `/v1/threads/${props.threadId}`)
      .then((t) => setVoice(Boolean(t.voice)))
      .catch((e) => setError(explain(e)));
  }, [props.threadId]);
  const toggle = async () => {
    try {
      const r = await api<{ voice: boolean }>("PUT", `/v1/threads/${props.threadId}/voice`, {
        enabled: !voice,
      });
      setVoice(r.voice);
      setError(null);
    } catch (e) {
      setError(explain(e));
    }
  };
  return (
    <div data-testid="voice-tab">
      <p class="muted">
        In voice mode replies are written to be spoken: short, plain sentences. Play a reply from
        its footer.
      </p>
      {voice !== null && (
        <label class="row">
          <input type="checkbox" checked={voice} onChange={toggle} data-testid="voice-toggle" />
          Voice mode
        </label>
      )}
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
    </div>
  );
}

function PlayAction(props: { turnId: string; threadId: string }) {
  const [playing, setPlaying] = useState(false);
  if (!props.turnId) return null;
  const src = `/v1/threads/${props.threadId}/speech?turn_id=${encodeURIComponent(props.turnId)}`;
  return (
    <>
      <button class="link small" data-testid="play-reply" onClick={() => setPlaying(true)}>
        Play
      </button>
      {playing && <audio src={src} autoPlay controls onEnded={() => setPlaying(false)} />}
    </>
  );
}

registerThreadTab({ id: "voice", label: "Voice", component: VoiceTab });
registerTurnAction({ id: "play", label: "Play", component: PlayAction });
