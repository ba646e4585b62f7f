// The graph of an assistant (`/assistants/{id}/graph`) drawn as layers:
// each node one layer below the longest path reaching it from __start__.

import { html } from "../vendor/preact-htm.js";

const BOX_W = 140;
const BOX_H = 32;
const GAP_X = 30;
const GAP_Y = 48;

export function layers(graph) {
  const nodes = graph.nodes.map((n) => n.id);
  const layer = new Map(nodes.map((id) => [id, 0]));
  // Longest path by relaxation, bounded (cycles stop growing after |nodes| passes).
  for (let pass = 0; pass < nodes.length; pass += 1) {
    let moved = false;
    for (const edge of graph.edges) {
      if (edge.source === edge.target) continue;
      const want = layer.get(edge.source) + 1;
      if (want > layer.get(edge.target) && want < nodes.length) {
        layer.set(edge.target, want);
        moved = true;
      }
    }
    if (!moved) break;
  }
  if (layer.has("__end__")) layer.set("__end__", Math.max(...layer.values()) + (graph.edges.some((e) => e.target === "__end__") ? 0 : 1));
  return layer;
}

export function GraphDrawing({ graph }) {
  if (!graph?.nodes?.length) return html`<p class="muted">No graph.</p>`;
  const layer = layers(graph);
  const rows = new Map();
  for (const node of graph.nodes) {
    const at = layer.get(node.id);
    if (!rows.has(at)) rows.set(at, []);
    rows.get(at).push(node.id);
  }
  const widest = Math.max(...[...rows.values()].map((row) => row.length));
  const width = widest * (BOX_W + GAP_X) + GAP_X;
  const place = new Map();
  for (const [at, row] of rows) {
    const offset = (width - row.length * (BOX_W + GAP_X) + GAP_X) / 2;
    row.forEach((id, i) => place.set(id, { x: offset + i * (BOX_W + GAP_X), y: GAP_Y / 2 + at * (BOX_H + GAP_Y) }));
  }
  const height = (Math.max(...rows.keys()) + 1) * (BOX_H + GAP_Y);
  return html`<div class="graph" data-testid="graph"><svg viewBox=${`0 0 ${width} ${height}`} width=${width} height=${height} role="img" aria-label="the graph">
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0 0L10 5L0 10z" fill="#98a2b3" /></marker></defs>
    ${graph.edges.map((edge) => {
      const from = place.get(edge.source);
      const to = place.get(edge.target);
      if (!from || !to) return null;
      const x1 = from.x + BOX_W / 2;
      const y1 = from.y + BOX_H;
      const x2 = to.x + BOX_W / 2;
      const y2 = to.y;
      const back = y2 <= y1;
      const d = back
        ? `M${from.x + BOX_W} ${from.y + BOX_H / 2} C ${from.x + BOX_W + 60} ${from.y}, ${to.x + BOX_W + 60} ${to.y + BOX_H}, ${to.x + BOX_W} ${to.y + BOX_H / 2}`
        : `M${x1} ${y1} C ${x1} ${y1 + GAP_Y / 2}, ${x2} ${y2 - GAP_Y / 2}, ${x2} ${y2}`;
      return html`<path class=${edge.conditional ? "edge conditional" : "edge"} d=${d} marker-end="url(#arrow)" />`;
    })}
    ${graph.nodes.map((node) => {
      const at = place.get(node.id);
      return html`<g data-node=${node.id}><rect x=${at.x} y=${at.y} width=${BOX_W} height=${BOX_H} rx="6" />
        <text x=${at.x + BOX_W / 2} y=${at.y + BOX_H / 2 + 4} text-anchor="middle">${node.data?.name || node.id}</text></g>`;
    })}
  </svg></div>`;
}
