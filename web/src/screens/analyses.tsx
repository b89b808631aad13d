// Analyses: per kind, the last 30 days' runs, model calls, cache hits, cost and the rule's
// fallback rate (flagged above 20%), and the latest records of a chosen kind.
import { useEffect, useState } from "preact/hooks";
import { api, explain, money } from "../api";

interface Stat {
  kind: string;
  runs: number;
  model_calls: number;
  cache_hits: number;
  fallbacks: number;
  cost_usd: string;
  fallback_rate: number;
  flagged: boolean;
}

interface AnalysisRow {
  id: string;
  kind: string;
  target: string;
  model: string;
  verdict: string;
  cost_usd: string;
  output: unknown;
  created_at: string;
}

export function Analyses() {
  const [stats, setStats] = useState<Stat[] | null>(null);
  const [kind, setKind] = useState<string>("");
  const [records, setRecords] = useState<AnalysisRow[]>([]);
  const [error, setError] = useState("");
  useEffect(() => {
    api<{ data: Stat[] }>("GET", "/v1/analyses/stats")
      .then((r) => setStats(r.data))
      .catch((e) => setError(explain(e)));
  }, []);
  useEffect(() => {
    const q = kind ? `?kind=${encodeURIComponent(kind)}&limit=50` : "?limit=50";
    api<{ data: AnalysisRow[] }>("GET", `/v1/analyses${q}`)
      .then((r) => setRecords(r.data))
      .catch((e) => setError(explain(e)));
  }, [kind]);
  return (
    <section>
      <h2>Analyses</h2>
      {error && <p class="error">{error}</p>}
      {stats && stats.length === 0 && <p class="muted">No analysis ran in the last 30 days.</p>}
      {stats && stats.length > 0 && (
        <div class="scroll-x">
          <table data-testid="analysis-stats">
            <thead>
              <tr>
                <th>Kind</th>
                <th>Runs</th>
                <th>Model calls</th>
                <th>Cache hits</th>
                <th>Fallback rate</th>
                <th>USD</th>
              </tr>
            </thead>
            <tbody>
              {stats.map((s) => (
                <tr class={s.flagged ? "flagged" : ""}>
                  <td>
                    <button class="link" onClick={() => setKind(s.kind)}>
                      {s.kind}
                    </button>
                  </td>
                  <td>{s.runs}</td>
                  <td>{s.model_calls}</td>
                  <td>{s.cache_hits}</td>
                  <td>
                    {(s.fallback_rate * 100).toFixed(1)}%
                    {s.flagged && <strong class="error" title="the rule answers more than 20% of computed runs"> ⚠</strong>}
                  </td>
                  <td>{money(s.cost_usd)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <h3>{kind ? `Latest ${kind}` : "Latest analyses"}</h3>
      {kind && (
        <button class="link" onClick={() => setKind("")}>
          all kinds
        </button>
      )}
      <div class="scroll-x">
        <table data-testid="analysis-records">
          <thead>
            <tr>
              <th>When</th>
              <th>Kind</th>
              <th>Target</th>
              <th>Model</th>
              <th>Verdict</th>
              <th>USD</th>
              <th>Output</th>
            </tr>
          </thead>
          <tbody>
            {records.map((r) => (
              <tr>
                <td>{new Date(r.created_at).toLocaleString()}</td>
                <td>{r.kind}</td>
                <td>{r.target.slice(0, 36)}</td>
                <td>{r.model}</td>
                <td>{r.verdict}</td>
                <td>{money(r.cost_usd)}</td>
                <td>
                  <code>{JSON.stringify(r.output).slice(0, 160)}</code>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
    </section>
  );
}
