// A stacked bar chart in SVG: one bar per column, one colour per series.

import { html } from "../vendor/preact-htm.js";

const COLOURS = ["#1f4e79", "#7a5af8", "#12b76a", "#f79009", "#f04438", "#06aed4", "#ee46bc", "#667085"];

export function colour(index) {
  return COLOURS[index % COLOURS.length];
}

/** columns: [{label, parts: {series: value}}]; series: the names, in stacking order. */
export function StackedBars({ columns, series, unit = "", testid }) {
  if (!columns.length) return html`<p class="muted">No data yet.</p>`;
  const width = 640;
  const height = 180;
  const left = 48;
  const bottom = 28;
  const totals = columns.map((c) => series.reduce((sum, s) => sum + (c.parts[s] || 0), 0));
  const top = Math.max(1, ...totals);
  const step = (width - left) / columns.length;
  const bar = Math.max(4, Math.min(48, step * 0.7));
  const scale = (value) => (value / top) * (height - bottom - 8);
  return html`<div data-testid=${testid}>
    <svg class="chart" viewBox=${`0 0 ${width} ${height}`} width="100%" role="img">
      <line x1=${left} y1=${height - bottom} x2=${width} y2=${height - bottom} stroke="#d0d5dd" />
      <text x=${left - 6} y=${12} text-anchor="end">${top.toLocaleString()}${unit}</text>
      <text x=${left - 6} y=${height - bottom} text-anchor="end">0</text>
      ${columns.map((column, i) => {
        let y = height - bottom;
        const x = left + i * step + (step - bar) / 2;
        return html`<g>
          ${series.map((name, s) => {
            const h = scale(column.parts[name] || 0);
            y -= h;
            return h > 0 ? html`<rect x=${x} y=${y} width=${bar} height=${h} fill=${colour(s)}><title>${name}: ${column.parts[name]}</title></rect>` : null;
          })}
          ${columns.length <= 24 || i % Math.ceil(columns.length / 12) === 0
            ? html`<text x=${x + bar / 2} y=${height - 10} text-anchor="middle">${column.label}</text>`
            : null}
        </g>`;
      })}
    </svg>
    <div class="legend">${series.map((name, s) => html`<span><i style=${{ background: colour(s) }}></i>${name}</span>`)}</div>
  </div>`;
}
