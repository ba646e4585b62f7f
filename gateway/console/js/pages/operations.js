// Operations: runs by status across threads (queued, running, stuck), token
// usage over time per model and per user, crons with their next firing, and
// the chat channels' bindings. All from the public API: the runs are read
// thread by thread (the newest threads first), as `waybill runs ls` does.

import { html, useState } from "../../vendor/preact-htm.js";
import { get, post } from "../api.js";
import { StackedBars } from "../chart.js";
import { ErrorBox, Loading, Status, ago, short, useLoad, when } from "../ui.js";
import { RunsTable } from "./thread.js";

const THREADS_SCANNED = 100;
const RUNS_PER_THREAD = 50;
// A run is "stuck" when it waited this long past its due time for a runner, or
// has been running this long.
const STUCK_PENDING_MS = 60_000;
const STUCK_RUNNING_MS = 15 * 60_000;

export function isStuck(run, now = Date.now()) {
  const age = now - new Date(run.status === "pending" ? run.created_at : run.updated_at).getTime();
  if (run.status === "pending") return age > STUCK_PENDING_MS;
  if (run.status === "running") return now - new Date(run.created_at).getTime() > STUCK_RUNNING_MS;
  return false;
}

async function recentRuns() {
  const threads = await post("/threads/search", { limit: THREADS_SCANNED, sort_by: "updated_at", sort_order: "desc" });
  const lists = await Promise.all(
    threads.map((t) => get(`/threads/${t.thread_id}/runs`, { limit: RUNS_PER_THREAD }).catch(() => [])),
  );
  const now = Date.now();
  return lists.flat().map((run) => ({ ...run, stuck: isStuck(run, now) }));
}

function bucketsOf(runs) {
  const times = runs.map((r) => new Date(r.created_at).getTime());
  const span = Math.max(...times) - Math.min(...times);
  const daily = span > 2 * 86_400_000;
  const keyOf = (time) => {
    const d = new Date(time);
    return daily ? d.toISOString().slice(0, 10) : `${d.toISOString().slice(0, 13)}:00`;
  };
  const labelOf = (key) => (daily ? key.slice(5) : `${key.slice(11, 13)}h`);
  return { keyOf, labelOf };
}

export function usageOverTime(runs) {
  const counted = runs.filter((r) => r.usage?.by_model);
  if (!counted.length) return { columns: [], series: [] };
  const { keyOf, labelOf } = bucketsOf(counted);
  const columns = new Map();
  const series = new Set();
  for (const run of counted) {
    const key = keyOf(new Date(run.created_at).getTime());
    if (!columns.has(key)) columns.set(key, {});
    const parts = columns.get(key);
    for (const [model, usage] of Object.entries(run.usage.by_model)) {
      series.add(model);
      parts[model] = (parts[model] || 0) + (usage.total_tokens || 0);
    }
  }
  const keys = [...columns.keys()].sort();
  return { columns: keys.map((key) => ({ label: labelOf(key), parts: columns.get(key) })), series: [...series] };
}

export function OperationsPage() {
  const runs = useLoad(recentRuns, []);
  return html`<section>
    <h1>Operations</h1>
    <${Loading} state=${runs}>${(all) => html`<${RunsByStatus} runs=${all} onReload=${runs.reload} />
      <div class="grid">
        <div class="card"><h2>Tokens over time, per model</h2><${StackedBars} testid="usage-by-model" ...${usageOverTime(all)} /></div>
        <${UsageByUser} />
      </div>`}<//>
    <div class="grid"><${Crons} /><${Channels} /></div>
  </section>`;
}

function RunsByStatus({ runs, onReload }) {
  const [filter, setFilter] = useState("active");
  const counts = {};
  for (const run of runs) counts[run.status] = (counts[run.status] || 0) + 1;
  const stuck = runs.filter((r) => r.stuck).length;
  const shown = runs.filter((r) =>
    filter === "active" ? ["pending", "running"].includes(r.status) : filter === "stuck" ? r.stuck : filter === "all" || r.status === filter,
  );
  const filters = [["active", `queued + running (${(counts.pending || 0) + (counts.running || 0)})`], ["stuck", `stuck (${stuck})`],
    ...["pending", "running", "success", "error", "interrupted", "timeout"].map((s) => [s, `${s} (${counts[s] || 0})`]), ["all", `all (${runs.length})`]];
  return html`<div class="card" data-testid="runs-by-status">
    <div class="spread"><h2>Runs by status</h2><button class="secondary" onClick=${onReload}>Refresh</button></div>
    <p class="muted">The ${THREADS_SCANNED} most recently updated threads, ${RUNS_PER_THREAD} runs each. Stuck: pending over ${STUCK_PENDING_MS / 1000}s past due, or running over ${STUCK_RUNNING_MS / 60000} min.</p>
    <div class="row">${filters.map(([id, label]) => html`<button class=${filter === id ? "" : "secondary"} data-filter=${id} onClick=${() => setFilter(id)}>${label}</button>`)}</div>
    <${RunsTable} runs=${shown.slice(0, 200)} showThread=${true} />
  </div>`;
}

function UsageByUser() {
  const [owners, setOwners] = useState("");
  const [asked, setAsked] = useState("");
  const usage = useLoad(async () => {
    const names = asked.split(",").map((s) => s.trim()).filter(Boolean);
    const answers = names.length ? await Promise.all(names.map((owner_id) => get("/token-usage", { owner_id }))) : [await get("/token-usage")];
    return answers;
  }, [asked]);
  return html`<div class="card"><h2>Tokens per user</h2>
    <form class="row" onSubmit=${(e) => { e.preventDefault(); setAsked(owners); }}>
      <input name="owners" placeholder="user ids, comma-separated (admins; empty: you)" value=${owners} onInput=${(e) => setOwners(e.target.value)} style=${{ flex: 1 }} />
      <button type="submit">Show</button>
    </form>
    <${Loading} state=${usage}>${(answers) => {
      const series = [...new Set(answers.flatMap((a) => Object.keys(a.by_model || {})))];
      const columns = answers.map((a) => ({ label: a.owner_id, parts: Object.fromEntries(Object.entries(a.by_model || {}).map(([m, u]) => [m, u.total_tokens || 0])) }));
      return html`<${StackedBars} testid="usage-by-user" columns=${columns} series=${series} />
        <table><thead><tr><th>user</th><th>runs</th><th>tokens</th><th>cost</th></tr></thead><tbody>
        ${answers.map((a) => html`<tr><td>${a.owner_id}</td><td>${a.runs}</td><td>${a.total_tokens}</td><td>${a.cost ?? "not priced"}</td></tr>`)}</tbody></table>`;
    }}<//>
  </div>`;
}

function Crons() {
  const crons = useLoad(() => post("/runs/crons/search", { limit: 100, sort_by: "next_run_date", sort_order: "asc" }), []);
  return html`<div class="card"><h2>Crons</h2><${Loading} state=${crons}>${(rows) =>
    rows.length
      ? html`<table data-testid="crons"><thead><tr><th>cron</th><th>schedule</th><th>next firing</th><th>assistant</th><th>thread</th><th>enabled</th></tr></thead><tbody>
        ${rows.map((c) => html`<tr key=${c.cron_id}><td class="mono">${short(c.cron_id)}</td><td class="mono">${c.schedule}${c.timezone ? ` (${c.timezone})` : ""}</td>
          <td title=${c.next_run_date}>${when(c.next_run_date)}</td><td class="mono">${short(c.assistant_id)}</td>
          <td>${c.thread_id ? html`<a class="mono" href=${`#/threads/${c.thread_id}`}>${short(c.thread_id)}</a>` : "new each time"}</td><td>${c.enabled ? "yes" : "no"}</td></tr>`)}
        </tbody></table>`
      : html`<p class="muted">No crons.</p>`}<//></div>`;
}

function Channels() {
  const channels = useLoad(() => get("/channels"), []);
  return html`<div class="card"><h2>Channel bindings</h2><${Loading} state=${channels}>${(rows) =>
    rows.length
      ? html`<table data-testid="channels"><thead><tr><th>channel</th><th>platform</th><th>owner</th><th>assistant</th><th>threads</th><th>busy</th><th>inbound</th></tr></thead><tbody>
        ${rows.map((c) => html`<tr key=${c.name}><td>${c.name}</td><td>${c.platform}${c.mode ? ` (${c.mode})` : ""}</td><td>${c.owner}</td>
          <td>${c.assistant_id ?? "lead_agent"}</td><td>${c.threads ?? "chat"}</td><td>${c.busy ?? "reject"}</td><td class="mono">${c.inbound_path ?? (c.mode === "polling" ? "polls" : "")}</td></tr>`)}
        </tbody></table>`
      : html`<p class="muted">No chat channel is configured.</p>`}<//></div>`;
}
