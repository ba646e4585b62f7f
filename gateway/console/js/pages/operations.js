// Operations: runs by status across threads (queued, running, stuck), token
// usage over time per model and per user, crons with their next firing, and
// the chat channels' bindings, and the caller's quotas (limits beside their use).
// All from the public API: the runs are read thread by thread (the newest
// threads first), as `waybill runs ls` does.

import { html, useState } from "../../vendor/preact-htm.js";
import { ApiError, get, post } from "../api.js";
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
    <${Quotas} />
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

// ---- quotas: GET /quotas/me, and /quotas/{principal} for admins ----

// A limit with a use counted against it: [limit, its label, use, its label, kind].
const METERED = [
  ["max_active_runs", "active runs", "active_runs", "active runs", "count"],
  ["max_pending_runs", "pending runs", "pending_runs", "pending runs", "count"],
  ["runs_per_minute", "runs per minute", "runs_this_minute", "runs this minute", "count"],
  ["tokens_per_day", "tokens per day", "tokens_today", "tokens today", "count"],
  ["cost_per_day", "cost per day", "cost_today", "cost today", "cost"],
];
// A limit on one run or one request, with no running total: [limit, label, kind].
const BOUNDS = [
  ["burst", "creations at once (burst)", "count"],
  ["max_tokens", "tokens per run", "count"],
  ["max_cost", "cost per run", "cost"],
  ["requests_per_second", "requests per second, per key and gateway", "count"],
];
const isSet = (value) => value !== null && value !== undefined;

export function amount(value, kind = "count") {
  const n = Number(value ?? 0);
  if (kind === "cost" && n > 0 && n < 0.01) return n.toPrecision(2);
  return n.toLocaleString("en-US", { maximumFractionDigits: kind === "cost" ? 2 : 0 });
}

function Quotas() {
  const mine = useLoad(() => get("/quotas/me"), []);
  const [name, setName] = useState("");
  const [asked, setAsked] = useState("");
  const theirs = useLoad(() => (asked ? get(`/quotas/${encodeURIComponent(asked)}`) : null), [asked]);
  return html`<div class="card" data-testid="quotas">
    <div class="spread"><h2>Quotas</h2><button class="secondary" onClick=${mine.reload}>Refresh</button></div>
    <${Loading} state=${mine}>${(report) => html`<${QuotaReport} report=${report} testid="quota-me" />`}<//>
    <form class="row" onSubmit=${(e) => { e.preventDefault(); setAsked(name.trim()); }}>
      <input name="principal" placeholder="another principal's user id (admins only)" value=${name} onInput=${(e) => setName(e.target.value)} style=${{ flex: 1 }} />
      <button type="submit">Look up</button>
    </form>
    ${!asked ? null
      : theirs.loading || (!theirs.data && !theirs.error) ? html`<p class="muted">Loading…</p>`
      : theirs.error ? html`<div class="error" role="alert" data-testid="quota-lookup-error">${lookupFailure(asked, theirs.error)}</div>`
      : html`<${QuotaReport} report=${theirs.data} testid="quota-lookup" />`}
  </div>`;
}

function lookupFailure(principal, error) {
  const detail = error instanceof ApiError && typeof error.detail === "string" ? error.detail : String(error.message || error);
  if (error?.status === 403) return `Not allowed: only admins may read another principal's quota (${principal}'s was asked).`;
  if (error?.status === 404) return `No quota found for ${principal}. (${detail})`;
  return `Could not read ${principal}'s quota: ${detail}`;
}

function QuotaReport({ report, testid }) {
  const { limits = {}, use = {} } = report;
  const metered = METERED.filter(([limit]) => isSet(limits[limit]));
  const bounds = BOUNDS.filter(([limit]) => isSet(limits[limit]));
  const unset = [...METERED, ...BOUNDS].filter(([limit]) => !isSet(limits[limit]));
  const who = html`<strong class="mono">${report.principal}</strong>`;
  if (!metered.length && !bounds.length) {
    return html`<p class="notice" data-testid=${testid} data-principal=${report.principal}>No quota is configured for ${who}: nothing limits their runs or spend.</p>`;
  }
  return html`<div data-testid=${testid} data-principal=${report.principal}>
    <h3>${who}</h3>
    ${metered.length ? html`<table><thead><tr><th>use</th><th>now / limit</th><th></th></tr></thead><tbody>
      ${metered.map(([limit, , used, label, kind]) => {
        const share = limits[limit] > 0 ? Math.min(1, (use[used] ?? 0) / limits[limit]) : 1;
        const tone = share >= 1 ? "bar error" : share >= 0.8 ? "bar warn" : "bar";
        return html`<tr key=${limit} data-limit=${limit} data-use=${use[used] ?? 0} data-value=${limits[limit]}>
          <td>${label}</td><td class="mono">${amount(use[used], kind)} / ${amount(limits[limit], kind)}</td>
          <td><div class="meter" title=${`${Math.round(share * 100)} %`}><div class=${tone} style=${{ width: `${share * 100}%` }}></div></div></td></tr>`;
      })}</tbody></table>` : null}
    ${bounds.length ? html`<p class="muted">${bounds.map(([limit, label, kind], i) => html`${i ? "; " : ""}<span data-limit=${limit} data-value=${limits[limit]}>${label}: ${amount(limits[limit], kind)}</span>`)}.</p>` : null}
    ${unset.length ? html`<p class="muted">No limit on: ${unset.map(([, label]) => label).join(", ")}.</p>` : null}
    <p class="muted" data-resets-at=${report.resets_at}>The day's tokens and cost start again ${when(report.resets_at)} (${until(report.resets_at)}).</p>
  </div>`;
}

function until(iso) {
  const minutes = Math.max(0, Math.round((new Date(iso).getTime() - Date.now()) / 60_000));
  return minutes < 60 ? `in ${minutes} min` : `in ${Math.floor(minutes / 60)} h ${minutes % 60} min`;
}
