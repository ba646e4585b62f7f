// Small shared pieces: loading data, a virtualized list, markdown, JSON, time.

import {
  html,
  useCallback,
  useEffect,
  useLayoutEffect,
  useRef,
  useState,
} from "../vendor/preact-htm.js";

/** Load something async; re-run when `deps` change. {data, error, loading, reload}. */
export function useLoad(load, deps) {
  const [state, setState] = useState({ data: null, error: null, loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setState((previous) => ({ ...previous, loading: true }));
    Promise.resolve()
      .then(load)
      .then(
        (data) => live && setState({ data, error: null, loading: false }),
        (error) => live && setState({ data: null, error, loading: false }),
      );
    return () => {
      live = false;
    };
  }, [...deps, tick]);
  return { ...state, reload: useCallback(() => setTick((n) => n + 1), []) };
}

export function Loading({ state, children }) {
  if (state.error) return html`<${ErrorBox} error=${state.error} />`;
  if (state.data === null && state.loading) return html`<p class="muted">Loading…</p>`;
  return children(state.data);
}

export function ErrorBox({ error }) {
  if (!error) return null;
  return html`<div class="error" role="alert">${String(error.message || error)}</div>`;
}

/**
 * A list that renders only the rows in view (plus a margin), for threads of
 * thousands of messages. Rows may differ in height: each rendered row is
 * measured and remembered; unseen rows count as `estimate` pixels.
 */
export function VirtualList({ items, render, estimate = 64, height = "60vh", stickToEnd = false, testid }) {
  const box = useRef(null);
  const heights = useRef(new Map());
  const [scroll, setScroll] = useState({ top: 0, view: 600 });
  const [, remeasured] = useState(0);
  const keyOf = (item, index) => String(item?.key ?? index);

  const offsets = [];
  let total = 0;
  items.forEach((item, index) => {
    offsets.push(total);
    total += heights.current.get(keyOf(item, index)) ?? estimate;
  });
  const margin = scroll.view;
  let first = 0;
  while (first < items.length - 1 && offsets[first + 1] < scroll.top - margin) first += 1;
  let last = first;
  while (last < items.length - 1 && offsets[last + 1] < scroll.top + scroll.view + margin) last += 1;

  const onScroll = () => {
    const el = box.current;
    if (el) setScroll({ top: el.scrollTop, view: el.clientHeight });
  };
  useLayoutEffect(() => {
    const el = box.current;
    if (!el) return;
    let changed = false;
    for (const row of el.querySelectorAll("[data-row]")) {
      const key = row.dataset.row;
      const measured = row.offsetHeight;
      if (measured && heights.current.get(key) !== measured) {
        heights.current.set(key, measured);
        changed = true;
      }
    }
    if (changed) remeasured((n) => n + 1);
  });
  const atEnd = useRef(true);
  useLayoutEffect(() => {
    const el = box.current;
    if (stickToEnd && el && atEnd.current) {
      el.scrollTop = el.scrollHeight;
    }
  }, [items.length, total]);
  useEffect(() => {
    const el = box.current;
    if (!el) return undefined;
    const track = () => {
      atEnd.current = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
    };
    el.addEventListener("scroll", track, { passive: true });
    setScroll({ top: el.scrollTop, view: el.clientHeight });
    return () => el.removeEventListener("scroll", track);
  }, []);

  const shown = items.length ? items.slice(first, last + 1) : [];
  const after = items.length ? total - (offsets[last] + (heights.current.get(keyOf(items[last], last)) ?? estimate)) : 0;
  return html`<div class="virtual" ref=${box} onScroll=${onScroll} style=${{ height }} data-testid=${testid} data-count=${items.length}>
    <div style=${{ height: `${items.length ? offsets[first] : 0}px` }}></div>
    ${shown.map(
      (item, i) =>
        html`<div data-row=${keyOf(item, first + i)} key=${keyOf(item, first + i)}>${render(item, first + i)}</div>`,
    )}
    <div style=${{ height: `${Math.max(0, after)}px` }}></div>
  </div>`;
}

/**
 * Text that grows many times a second (a token stream): chunks are buffered
 * and the state updated at most once per animation frame, so a 2,000-token
 * answer costs a few hundred renders, not 2,000.
 */
export function useFrameBatcher(apply) {
  const pending = useRef([]);
  const frame = useRef(0);
  const applyRef = useRef(apply);
  applyRef.current = apply;
  useEffect(() => () => cancelAnimationFrame(frame.current), []);
  return useCallback((item) => {
    pending.current.push(item);
    if (frame.current) return;
    frame.current = requestAnimationFrame(() => {
      frame.current = 0;
      const batch = pending.current;
      pending.current = [];
      applyRef.current(batch);
    });
  }, []);
}

// ---- markdown: a small, safe subset (never innerHTML: text nodes only) ----

export function Markdown({ text }) {
  const blocks = [];
  const lines = String(text ?? "").split("\n");
  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i];
    if (line.startsWith("```")) {
      const code = [];
      for (i += 1; i < lines.length && !lines[i].startsWith("```"); i += 1) code.push(lines[i]);
      blocks.push(html`<pre class="code"><code>${code.join("\n")}</code></pre>`);
    } else if (/^#{1,4} /.test(line)) {
      const level = line.indexOf(" ");
      blocks.push(html`<p class=${`h h${level}`}>${inline(line.slice(level + 1))}</p>`);
    } else if (/^\s*[-*] /.test(line)) {
      const items = [];
      for (; i < lines.length && /^\s*[-*] /.test(lines[i]); i += 1) {
        items.push(html`<li>${inline(lines[i].replace(/^\s*[-*] /, ""))}</li>`);
      }
      i -= 1;
      blocks.push(html`<ul>${items}</ul>`);
    } else if (line.trim()) {
      blocks.push(html`<p>${inline(line)}</p>`);
    }
  }
  return html`<div class="markdown">${blocks}</div>`;
}

function inline(text) {
  const parts = [];
  const pattern = /(`[^`]+`|\*\*[^*]+\*\*|\[[^\]]+\]\([^)\s]+\))/g;
  let at = 0;
  for (const match of text.matchAll(pattern)) {
    parts.push(text.slice(at, match.index));
    const token = match[0];
    if (token.startsWith("`")) parts.push(html`<code>${token.slice(1, -1)}</code>`);
    else if (token.startsWith("**")) parts.push(html`<strong>${token.slice(2, -2)}</strong>`);
    else {
      const [, label, href] = token.match(/\[([^\]]+)\]\(([^)]+)\)/);
      const safe = /^https?:\/\//.test(href) ? href : null;
      parts.push(safe ? html`<a href=${safe} rel="noopener noreferrer" target="_blank">${label}</a>` : label);
    }
    at = match.index + token.length;
  }
  parts.push(text.slice(at));
  return parts;
}

export function Json({ value, open = true }) {
  return html`<pre class="json">${JSON.stringify(value, null, 2)}</pre>`;
}

export function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return Number.isNaN(date.getTime()) ? String(iso) : date.toLocaleString();
}

export function ago(iso) {
  const seconds = (Date.now() - new Date(iso).getTime()) / 1000;
  if (!Number.isFinite(seconds)) return "";
  if (seconds < 60) return `${Math.max(0, Math.round(seconds))}s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)}m ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)}h ago`;
  return `${Math.round(seconds / 86400)}d ago`;
}

export const short = (id) => String(id ?? "").slice(0, 8);

export function Status({ value }) {
  return html`<span class=${`status status-${value}`}>${value}</span>`;
}

export function Tabs({ tabs, current, onPick }) {
  return html`<nav class="tabs">
    ${tabs.map(
      ([id, label]) =>
        html`<button class=${id === current ? "tab on" : "tab"} onClick=${() => onPick(id)} data-tab=${id}>${label}</button>`,
    )}
  </nav>`;
}

export function parseJson(text, fallback) {
  if (!String(text ?? "").trim()) return fallback;
  return JSON.parse(text);
}
