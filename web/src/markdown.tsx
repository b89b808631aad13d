// Replies as markdown, safely: markdown-it with raw HTML off (`<img onerror=…>` in a reply is
// shown as text), its link check on (javascript:, vbscript:, file: and non-image data: URLs
// are not made links), every link opened in a new tab without the opener, and images shown
// as links (a reply cannot make the browser fetch a URL by itself: no tracking pixels, no
// data carried out in an image's address). Code (fenced and inline) is monospace; long lines
// wrap (style.css `.md`).
//
// The renderer is its own chunk (most of the bundle's weight), fetched once after login
// (`loadMarkdown`, main.tsx) so the login page does not wait for it; until it is in, a reply
// is shown as plain text, which is just as safe.
import { useEffect, useState } from "preact/hooks";
import type { MarkdownIt } from "markdown-it";

let md: MarkdownIt | null = null;
let pending: Promise<void> | null = null;
const waiting = new Set<() => void>();

function configure(it: MarkdownIt): MarkdownIt {
  const linkOpen = it.renderer.rules.link_open ?? ((tokens, idx, options, _env, self) => self.renderToken(tokens, idx, options));
  it.renderer.rules.link_open = (tokens, idx, options, env, self) => {
    tokens[idx].attrSet("target", "_blank");
    tokens[idx].attrSet("rel", "noopener noreferrer nofollow");
    return linkOpen(tokens, idx, options, env, self);
  };
  it.renderer.rules.image = (tokens, idx) => {
    const t = tokens[idx];
    const src = it.utils.escapeHtml(String(t.attrGet("src") ?? "")); // already passed validateLink
    const alt = it.utils.escapeHtml(t.content || "image");
    return `<a href="${src}" target="_blank" rel="noopener noreferrer nofollow">[image: ${alt}]</a>`;
  };
  return it;
}

/** Fetch the renderer (once); every Markdown on screen re-renders when it is in. */
export function loadMarkdown(): Promise<void> {
  pending ??= import("markdown-it").then(
    ({ default: Renderer }) => {
      md = configure(new Renderer({ html: false, linkify: true, breaks: true }));
      for (const w of waiting) w();
      waiting.clear();
    },
    (err) => {
      pending = null; // try again on the next Markdown shown
      console.warn("markdown renderer not loaded", err);
    },
  );
  return pending;
}

/** A block of markdown text (a model's reply, a subagent's result). */
export function Markdown(props: { text: string; class?: string }) {
  const [, setReady] = useState(md !== null);
  useEffect(() => {
    if (md) return;
    const ready = () => setReady(true);
    waiting.add(ready);
    loadMarkdown();
    return () => {
      waiting.delete(ready);
    };
  }, []);
  const cls = `md ${props.class ?? ""}`;
  if (!md) return <div class={`${cls} plain`}>{props.text}</div>;
  return <div class={cls} dangerouslySetInnerHTML={{ __html: md.render(props.text) }} />;
}
