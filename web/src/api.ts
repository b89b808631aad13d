// HTTP to /v1 with the session cookie. The CSRF token lives in memory only (never in
// localStorage); after a reload it is read back from GET /v1/sessions/current.

export interface Who {
  org_id: string;
  user_id: string;
  role: "admin" | "member" | "viewer";
  key_id: string;
  operator: boolean;
  csrf_token: string | null;
}

export class ApiError extends Error {
  constructor(
    public status: number,
    public code: string,
    detail: string,
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
  csrf_failed: "This page is out of date. Reload it and try again.",
  forbidden: "Your role does not allow this. Ask an admin of your org.",
  not_found: "It does not exist, or it belongs to another org.",
  rate_limited: "Too many requests. Wait a minute and try again.",
  budget_exceeded: "The org's monthly budget is spent. An admin can raise it.",
  payload_too_large: "That is too large to send. Shorten it.",
  validation_failed: "Something in the form is not valid.",
  unavailable: "The server is not ready. Try again in a moment.",
};

export function explain(err: unknown): string {
  if (err instanceof ApiError) {
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
    let detail = data?.detail ?? res.statusText;
    if (Array.isArray(data?.errors) && data.errors.length) {
      detail += ": " + data.errors.map((e: any) => `${(e.loc ?? []).slice(1).join(".")} ${e.msg}`).join("; ");
    }
    const error = new ApiError(res.status, data?.code ?? "error", String(detail));
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
