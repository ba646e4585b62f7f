// The graph of an assistant (`/assistants/{id}/graph`, LangGraph's `get_graph()`
// JSON) drawn top-down as LangGraph's own drawings are: __start__ first, each node
// one row below the longest path reaching it, __end__ on the last row. A loop
// (`agent ⇄ tools`) is one edge down and one back up: the edge that closes a cycle
// is left out of the layering (else the cycle would push its nodes down forever)
// and drawn going back up.

import { html } from "../vendor/preact-htm.js";

const BOX_W = 140;
const BOX_H = 32;
const GAP_X = 30;
const GAP_Y = 48;
const LOOP_OUT = 60; // how far a long way back swings out to the right

const START = "__start__";
const END = "__end__";

/** The edges that close a cycle, found depth-first from __start__ (edge order). */
export function backEdges(graph) {
  const outgoing = new Map(graph.nodes.map((n) => [n.id, []]));
  for (const edge of graph.edges) outgoing.get(edge.source)?.push(edge);
  const state = new Map(); // id -> "open" (on the current path) | "done"
  const back = new Set();
  const visit = (id) => {
    state.set(id, "open");
    for (const edge of outgoing.get(id) || []) {
      const seen = state.get(edge.target);
      if (seen === "open") back.add(edge);
      else if (seen === undefined && outgoing.has(edge.target)) visit(edge.target);
    }
    state.set(id, "done");
  };
  const roots = [START, ...graph.nodes.map((n) => n.id)].filter((id) => outgoing.has(id));
  for (const id of roots) if (!state.has(id)) visit(id);
  return back;
}

/** Each node's row: the longest path to it over the edges that go forward. */
export function layers(graph) {
  const back = backEdges(graph);
  const forward = graph.edges.filter((e) => !back.has(e) && e.source !== e.target);
  const layer = new Map(graph.nodes.map((n) => [n.id, 0]));
  // Without cycles, |nodes| passes of relaxation reach every longest path.
  for (let pass = 0; pass < graph.nodes.length; pass += 1) {
    let moved = false;
    for (const edge of forward) {
      if (!layer.has(edge.source) || !layer.has(edge.target)) continue;
      const want = layer.get(edge.source) + 1;
      if (want > layer.get(edge.target)) {
        layer.set(edge.target, want);
        moved = true;
      }
    }
    if (!moved) break;
  }
  if (layer.has(END)) {
    const others = [...layer].filter(([id]) => id !== END).map(([, at]) => at);
    const reached = graph.edges.some((e) => e.target === END);
    // __end__ on the last row (below it when no edge leads there).
    layer.set(END, Math.max(layer.get(END), ...others.map((at) => (reached ? at : at + 1))));
  }
  return layer;
}

function placeNodes(graph, layer) {
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
  return { place, width, height };
}

/** The path of one edge: down from the source's bottom to the target's top; back
 * up from the source's top to the target's bottom (beside the edge going down) when
 * the target is the row above; round the right side when it is further up. */
function edgePath(from, to, rowsUp) {
  if (rowsUp < 0) {
    const x1 = from.x + BOX_W / 2;
    const y1 = from.y + BOX_H;
    const x2 = to.x + BOX_W / 2;
    return `M${x1} ${y1} C ${x1} ${y1 + GAP_Y / 2}, ${x2} ${to.y - GAP_Y / 2}, ${x2} ${to.y}`;
  }
  if (rowsUp === 1) {
    const x1 = from.x + (BOX_W * 3) / 4;
    const x2 = to.x + (BOX_W * 3) / 4;
    const y2 = to.y + BOX_H;
    return `M${x1} ${from.y} C ${x1} ${from.y - GAP_Y / 2}, ${x2} ${y2 + GAP_Y / 2}, ${x2} ${y2}`;
  }
  const right = Math.max(from.x, to.x) + BOX_W;
  return `M${from.x + BOX_W} ${from.y + BOX_H / 2} C ${right + LOOP_OUT} ${from.y}, ${right + LOOP_OUT} ${to.y + BOX_H}, ${to.x + BOX_W} ${to.y + BOX_H / 2}`;
}

export function GraphDrawing({ graph }) {
  if (!graph?.nodes?.length) return html`<p class="muted">No graph.</p>`;
  const layer = layers(graph);
  const { place, width, height } = placeNodes(graph, layer);
  const rowsUp = (edge) => layer.get(edge.source) - layer.get(edge.target);
  // Room on the right for a long way back or a node's edge to itself.
  const swings = graph.edges.some((e) => place.has(e.source) && place.has(e.target) && rowsUp(e) !== 1 && rowsUp(e) >= 0);
  const drawnWidth = width + (swings ? LOOP_OUT : 0);
  return html`<div class="graph" data-testid="graph"><svg viewBox=${`0 0 ${drawnWidth} ${height}`} width=${drawnWidth} height=${height} role="img" aria-label="the graph">
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0 0L10 5L0 10z" fill="#98a2b3" /></marker></defs>
    ${graph.edges.map((edge) => {
      const from = place.get(edge.source);
      const to = place.get(edge.target);
      if (!from || !to) return null;
      const up = rowsUp(edge);
      return html`<path class=${edge.conditional ? "edge conditional" : "edge"} data-edge=${`${edge.source}->${edge.target}`}
        data-direction=${up < 0 ? "down" : "up"} d=${edgePath(from, to, up)} marker-end="url(#arrow)" />`;
    })}
    ${graph.nodes.map((node) => {
      const at = place.get(node.id);
      return html`<g data-node=${node.id} data-layer=${layer.get(node.id)}><rect x=${at.x} y=${at.y} width=${BOX_W} height=${BOX_H} rx="6" />
        <text x=${at.x + BOX_W / 2} y=${at.y + BOX_H / 2 + 4} text-anchor="middle">${node.data?.name || node.id}</text></g>`;
    })}
  </svg></div>`;
}
