// Replies as markdown, safely: markdown-it with raw HTML off (`<img onerror=…>` in a reply is
// shown as text), its link check on (javascript:, vbscript:, file: and non-image data: URLs
// are not made links), every link opened in a new tab without the opener, and images shown
// as links (a reply cannot make the browser fetch a URL by itself: no tracking pixels, no
// data carried out in an image's address). Code (fenced and inline) is monospace; long lines
// wrap (style.css `.md`).
import MarkdownIt from "markdown-it";

const md = new MarkdownIt({ html: false, linkify: true, breaks: true });

const defaultLinkOpen =
  md.renderer.rules.link_open ?? ((tokens, idx, options, _env, self) => self.renderToken(tokens, idx, options));
md.renderer.rules.link_open = (tokens, idx, options, env, self) => {
  tokens[idx].attrSet("target", "_blank");
  tokens[idx].attrSet("rel", "noopener noreferrer nofollow");
  return defaultLinkOpen(tokens, idx, options, env, self);
};

md.renderer.rules.image = (tokens, idx) => {
  const t = tokens[idx];
  const src = md.utils.escapeHtml(String(t.attrGet("src") ?? "")); // already passed validateLink
  const alt = md.utils.escapeHtml(t.content || "image");
  return `<a href="${src}" target="_blank" rel="noopener noreferrer nofollow">[image: ${alt}]</a>`;
};

export function renderMarkdown(text: string): string {
  return md.render(text);
}

/** A block of markdown text (a model's reply, a subagent's result). */
export function Markdown(props: { text: string; class?: string }) {
  return <div class={`md ${props.class ?? ""}`} dangerouslySetInnerHTML={{ __html: renderMarkdown(props.text) }} />;
}
