// A tiny history router under /ui: no hash, the server answers any /ui path with the app.
import { useEffect, useState } from "preact/hooks";

const BASE = "/ui";

export function currentPath(): string {
  const p = location.pathname.startsWith(BASE) ? location.pathname.slice(BASE.length) : "/";
  return p || "/";
}

const listeners = new Set<() => void>();
window.addEventListener("popstate", () => listeners.forEach((l) => l()));

export function navigate(to: string): void {
  history.pushState(null, "", BASE + to);
  listeners.forEach((l) => l());
}

export function usePath(): string {
  const [path, setPath] = useState(currentPath());
  useEffect(() => {
    const l = () => setPath(currentPath());
    listeners.add(l);
    return () => listeners.delete(l);
  }, []);
  return path;
}

export function Link(props: { to: string; children: any; class?: string; testid?: string }) {
  return (
    <a
      href={BASE + props.to}
      class={props.class}
      data-testid={props.testid}
      onClick={(e) => {
        if (e.metaKey || e.ctrlKey || e.shiftKey || e.button !== 0) return;
        e.preventDefault();
        navigate(props.to);
      }}
    >
      {props.children}
    </a>
  );
}
