// HTTP to /v1 with the session cookie. The CSRF token lives in memory only (never in
// localStorage); after a reload it is read back from GET /v1/sessions/current.

export interface Who {
  org_id: string;
  user_id: string;
  role: "admin" | "member" | "viewer";
  key_id: string;
  operator: boolean;
  csrf_token: string | null;
  sso?: boolean; // single sign-on made this session: the console refreshes it (see main.tsx)
  expires_at?: string; // when the session ends (known once an SSO session was refreshed)
}

// An SSO session asked again at its identity provider: a new session (cookie), a new CSRF
// token, or a 401 `sso_refused` once the provider no longer accepts the person.
export interface Refreshed {
  org_id: string;
  role: Who["role"];
  csrf_token: string;
  expires_at: string;
}

export interface FieldError {
  loc: string[];
  msg: string;
}

export class ApiError extends Error {
  constructor(
    public status: number,
    public code: string,
    detail: string,
    public errors: FieldError[] = [],
  ) {
    super(detail);
  }
}

let csrf: string | null = null;
export function setCsrf(token: string | null): void {
  csrf = token;
}
export function getCsrf(): string | null {
  return csrf;
}

// What a person can do about each problem code; the server's detail is added below.
const ADVICE: Record<string, string> = {
  unauthenticated: "Your session ended. Log in again with an API key.",
  sso_refused: "You are signed out.",
  csrf_failed: "This page is out of date. Reload it and try again.",
  forbidden: "Your role does not allow this. Ask an admin of your org.",
  not_found: "It does not exist, or it belongs to another org.",
  rate_limited: "Too many requests. Wait a minute and try again.",
  budget_exceeded: "The org's monthly budget is spent. An admin can raise it.",
  payload_too_large: "That is too large to send. Shorten it.",
  validation_failed: "Something in the form is not valid.",
  unavailable: "The server is not ready. Try again in a moment.",
};

// Codes whose server detail is written for an HTTP client (it names routes): the console says
// it in its own words, with the field the server named.
const CONSOLE_WORDS: Record<string, (field: string) => string> = {
  secret_in_config: (field) =>
    `${field || "A field"} holds a credential in clear, which a setup never keeps. Save the value on the Secrets screen, then write "secret:NAME" here in its place.`,
};

export function explain(err: unknown): string {
  if (err instanceof ApiError) {
    const words = CONSOLE_WORDS[err.code];
    if (words) return words(err.errors[0]?.loc?.join(".") ?? "");
    const advice = ADVICE[err.code];
    return advice ? `${advice} (${err.message})` : err.message;
  }
  if (err instanceof TypeError) return "Cannot reach the server. Check that ator is running.";
  return String((err as Error)?.message ?? err);
}

export async function api<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  const headers: Record<string, string> = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && csrf) headers["X-CSRF-Token"] = csrf;
  const res = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  if (res.status === 204) return undefined as T;
  const text = await res.text();
  let data: any = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = { detail: text };
  }
  if (!res.ok) {
    let detail = String(data?.detail ?? res.statusText);
    const errors: FieldError[] = Array.isArray(data?.errors)
      ? data.errors.map((e: any) => ({ loc: (e.loc ?? []).map(String), msg: String(e.msg ?? "") }))
      : [];
    // A request validation error names its fields only in `errors`; a refusal that already
    // says them in its detail is not repeated.
    const unsaid = errors.filter((e) => !detail.includes(e.msg));
    if (unsaid.length) detail += ": " + unsaid.map((e) => `${e.loc.slice(1).join(".")} ${e.msg}`).join("; ");
    const error = new ApiError(res.status, data?.code ?? "error", detail, errors);
    // A session that ended (logout elsewhere, revoked key, expiry): back to the login form.
    if (res.status === 401 && !path.startsWith("/v1/sessions")) {
      window.dispatchEvent(new CustomEvent("ator:session-ended", { detail: explain(error) }));
    }
    throw error;
  }
  return data as T;
}

export const money = (v: string | number | null | undefined): string =>
  `$${Number(v ?? 0).toFixed(Number(v ?? 0) < 0.01 ? 6 : 4)}`;
