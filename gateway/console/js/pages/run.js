// One run, live: its events as they stream (resumed after a drop), a timeline
// of its model and tool calls from the journal, usage and cost per model, the
// receipt, workspace changes, outputs and webhook deliveries; cancel, rerun, join.

import { html, useEffect, useRef, useState } from "../../vendor/preact-htm.js";
import { TERMINAL, api, download, get, post } from "../api.js";
import { followRun } from "../sse.js";
import { ErrorBox, Json, Loading, Status, VirtualList, short, useFrameBatcher, useLoad, when } from "../ui.js";

// What the server puts into a run's configurable (a client's values are replaced):
// a rerun sends the run's own config without them.
const SERVER_SET = /^(langgraph_auth_|user_id$|run_id$|thread_id$|assistant_id$|graph_id$)/;

function clientConfig(config) {
  if (!config) return undefined;
  const configurable = Object.fromEntries(
    Object.entries(config.configurable || {}).filter(([key]) => !SERVER_SET.test(key)),
  );
  return { ...config, configurable };
}

const TIMELINE_REFRESH_MS = 2000;
const CALL_RECORDS = ["llm_start", "llm_end", "llm_error", "tool_start", "tool_end", "tool_error"];

/** The attempt a run's `metadata` event announces (each attempt starts with one). */
function attemptOf(event, runId) {
  const data = event.data;
  if (event.event !== "metadata" || !data || data.run_id !== runId) return null;
  return Number.isInteger(data.attempt) ? data.attempt : null;
}

export function RunPage({ threadId, runId }) {
  const run = useLoad(() => get(`/threads/${threadId}/runs/${runId}`), [threadId, runId]);
  const [events, setEvents] = useState([]);
  const [link, setLink] = useState({ state: "connecting", reconnects: 0 });
  const [ended, setEnded] = useState(0); // bumps the journal-backed panels
  // The latest attempt the stream announced: above 1, another runner took the run
  // over (its lease was lost or handed back) and resumed it from its checkpoint.
  const [attempt, setAttempt] = useState(null);
  const follower = useRef(null);
  const [tick, setTick] = useState(0); // the timeline, re-read while the run goes
  useEffect(() => {
    if (link.state !== "live") return undefined;
    const timer = setInterval(() => setTick((n) => n + 1), TIMELINE_REFRESH_MS);
    return () => clearInterval(timer);
  }, [link.state]);
  const push = useFrameBatcher((batch) => setEvents((list) => list.concat(batch)));

  useEffect(() => {
    setEvents([]);
    const follow = followRun(threadId, runId, {
      onEvent: (event, seq) => {
        const announced = attemptOf(event, runId);
        if (announced !== null) setAttempt((seen) => Math.max(seen ?? 0, announced));
        push({ key: String(seq ?? Math.random()), seq, event: event.event, data: event.data });
      },
      onStatus: (status) => {
        setLink(status);
        if (status.state === "ended") {
          run.reload();
          setEnded((n) => n + 1);
        }
        // The stream refused for good (the run deleted: rolled back by another run,
        // or its thread gone): re-read the run, or the header would still offer
        // Cancel on a run that is over.
        if (status.state === "failed") run.reload();
      },
    });
    follower.current = follow;
    follow.done.catch(() => {});
    return () => follow.stop();
  }, [threadId, runId]);

  // Receipts and the rest are written as the run ends: asked for only then.
  const [rolledBack, setRolledBack] = useState(false); // nothing of it is left to read
  // The stream ends after the receipt is written (a cancelled run may read
  // `interrupted` a moment before): the follower's end, not the status, says when.
  const finished = link.state === "ended" && !rolledBack ? 1 : 0;
  const rollingBack = () => {
    setRolledBack(true);
    follower.current?.stop();
  };
  return html`<section>
    <div class="spread">
      <h1>Run <span class="mono">${runId}</span></h1>
      <a href=${`#/threads/${threadId}`}>thread ${short(threadId)}</a>
    </div>
    <${Loading} state=${run}>${(r) => html`<${RunHeader} run=${r} attempt=${attempt} threadId=${threadId} onChanged=${run.reload} onRollback=${rollingBack} />`}<//>
    <div class="card">
      <div class="spread">
        <h2>Events <span class="muted" data-testid="event-count">${events.length}</span></h2>
        <span class="row">
          <${Status} value=${link.state} />
          <span class="muted" data-testid="reconnects">reconnects: ${link.reconnects}</span>
          <button class="secondary" onClick=${() => follower.current?.drop()} disabled=${link.state !== "live"} data-testid="drop">Drop connection</button>
        </span>
      </div>
      ${link.error ? html`<${ErrorBox} error=${link.error} />` : null}
      <${VirtualList} testid="events" items=${events} estimate=${24} height="40vh" stickToEnd=${true} render=${(e) => html`<div class="event" data-seq=${e.seq}>
        <span class="seq">${e.seq}</span><span class="name">${e.event}</span><span class="data">${JSON.stringify(e.data)}</span>
      </div>`} />
    </div>
    <${Timeline} threadId=${threadId} runId=${runId} ended=${`${ended}.${tick}`} />
    <div class="grid">
      <${Loading} state=${run}>${(r) => html`<${UsagePanel} usage=${r.usage} />`}<//>
      <${Receipt} threadId=${threadId} runId=${runId} ended=${finished && ended} />
      <${Changes} threadId=${threadId} runId=${runId} ended=${finished && ended} />
      <${Outputs} threadId=${threadId} ended=${finished && ended} />
      <${Deliveries} threadId=${threadId} runId=${runId} ended=${finished && ended} />
    </div>
  </section>`;
}

/** Which attempt is running the run, and whether it was taken over. */
function Attempt({ attempt }) {
  if (attempt === null) return html`<span class="muted">not started</span>`;
  const takeovers = attempt - 1;
  return html`${attempt}${takeovers > 0
    ? html` <span class="status status-interrupted" data-testid="taken-over" title="another runner resumed it from its last checkpoint">taken over${takeovers > 1 ? ` ${takeovers}×` : ""}</span>`
    : null}`;
}

function RunHeader({ run, attempt, threadId, onChanged, onRollback }) {
  const [error, setError] = useState(null);
  const [joined, setJoined] = useState(null);
  const [busy, setBusy] = useState("");
  const active = !TERMINAL.has(run.status);
  const act = (name, work) => async () => {
    setBusy(name);
    setError(null);
    try {
      await work();
    } catch (e) {
      setError(e);
    } finally {
      setBusy("");
    }
  };
  const cancel = (action) =>
    act(action, async () => {
      if (action === "rollback") onRollback();
      await api("POST", `/threads/${threadId}/runs/${run.run_id}/cancel`, { query: { action, wait: false } });
      if (action === "rollback") window.location.hash = `#/threads/${threadId}`;
      else onChanged();
    });
  const rerun = act("rerun", async () => {
    const kwargs = run.kwargs || {};
    const again = await post(`/threads/${threadId}/runs`, {
      assistant_id: run.assistant_id,
      input: kwargs.input ?? null,
      command: kwargs.command ?? undefined,
      config: clientConfig(kwargs.config),
      context: kwargs.context ?? undefined,
      metadata: run.metadata ?? undefined,
      stream_mode: kwargs.stream_mode ?? ["values", "messages-tuple", "updates"],
      multitask_strategy: "enqueue",
    });
    window.location.hash = `#/threads/${threadId}/runs/${again.run_id}`;
  });
  const join = act("join", async () => setJoined(await get(`/threads/${threadId}/runs/${run.run_id}/join`)));
  return html`<div class="card">
    <div class="spread">
      <dl class="kv">
        <dt>status</dt><dd data-testid="run-status"><${Status} value=${run.status} /></dd>
        <dt>assistant</dt><dd>${run.assistant_id}</dd>
        <dt>created</dt><dd>${when(run.created_at)}</dd>
        <dt>updated</dt><dd>${when(run.updated_at)}</dd>
        <dt>strategy</dt><dd>${run.multitask_strategy}</dd>
        <dt>attempt</dt><dd data-testid="run-attempt"><${Attempt} attempt=${attempt} /></dd>
      </dl>
      <div class="row">
        <button class="danger" onClick=${cancel("interrupt")} disabled=${!active || busy} data-testid="cancel">Cancel</button>
        <button class="danger" onClick=${cancel("rollback")} disabled=${!active || busy} data-testid="rollback">Cancel and roll back</button>
        <button class="secondary" onClick=${rerun} disabled=${busy} data-testid="rerun">Rerun</button>
        <button class="secondary" onClick=${join} disabled=${busy} data-testid="join">Join</button>
      </div>
    </div>
    <${ErrorBox} error=${error} />
    ${joined !== null ? html`<h3>Joined: the run's result</h3><${Json} value=${joined} />` : null}
  </div>`;
}

function Timeline({ threadId, runId, ended }) {
  const records = useLoad(
    () => get(`/threads/${threadId}/runs/${runId}/events`, { type: CALL_RECORDS.join(","), limit: 1000 }),
    [threadId, runId, ended],
  );
  return html`<div class="card"><h2>Model and tool calls</h2>
    <${Loading} state=${records}>${(rows) => {
      const calls = rows.filter((r) => /_(end|error)$/.test(r.type));
      if (!calls.length) return html`<p class="muted">No model or tool call recorded yet.</p>`;
      const spans = calls.map((r) => {
        const endAt = new Date(r.created_at).getTime();
        const duration = Number(r.data.duration_ms || 0);
        return { record: r, start: endAt - duration, duration };
      });
      const origin = Math.min(...spans.map((s) => s.start));
      const span = Math.max(1, Math.max(...spans.map((s) => s.start + s.duration)) - origin);
      return html`<table data-testid="timeline">
        <thead><tr><th>call</th><th>name</th><th>latency</th><th>tokens in / out</th><th style=${{ width: "40%" }}>when</th></tr></thead>
        <tbody>${spans.map(({ record, start, duration }) => {
          const tool = record.type.startsWith("tool");
          const usage = record.data.usage || {};
          return html`<tr key=${record.seq}>
            <td>${tool ? "tool" : "model"}${record.type.endsWith("error") ? " (error)" : ""}</td>
            <td class="mono">${tool ? record.data.name : record.data.model}${record.data.source && !tool ? html` <span class="muted">${record.data.source}</span>` : null}</td>
            <td>${duration < 10 ? duration.toFixed(1) : Math.round(duration)} ms</td>
            <td>${tool ? "" : `${usage.input_tokens ?? 0} / ${usage.output_tokens ?? 0}`}</td>
            <td><div class=${`bar ${tool ? "tool" : ""} ${record.type.endsWith("error") ? "error" : ""}`} style=${{ marginLeft: `${((start - origin) / span) * 100}%`, width: `${(duration / span) * 100}%` }}></div></td>
          </tr>`;
        })}</tbody></table>`;
    }}<//>
  </div>`;
}

function UsagePanel({ usage }) {
  if (!usage) return html`<div class="card"><h2>Tokens and cost</h2><p class="muted">Counted when the run ends.</p></div>`;
  const models = Object.entries(usage.by_model || {});
  return html`<div class="card" data-testid="usage"><h2>Tokens and cost</h2>
    <dl class="kv"><dt>input</dt><dd>${usage.input_tokens}</dd><dt>output</dt><dd>${usage.output_tokens}</dd>
    <dt>model calls</dt><dd>${usage.llm_calls}</dd><dt>cost</dt><dd>${usage.cost ?? "not priced"}</dd></dl>
    ${models.length ? html`<table><thead><tr><th>model</th><th>in</th><th>out</th><th>cost</th></tr></thead><tbody>
      ${models.map(([name, m]) => html`<tr><td>${name}</td><td>${m.input_tokens}</td><td>${m.output_tokens}</td><td>${m.cost ?? ""}</td></tr>`)}
    </tbody></table>` : null}
  </div>`;
}

function Optional({ title, path, ended, children, testid }) {
  const state = useLoad(
    () => (ended ? get(path).catch((e) => (e.status === 404 ? { missing: true } : Promise.reject(e))) : { waiting: true }),
    [path, ended],
  );
  const shown = (data) => {
    if (data?.waiting) return html`<p class="muted">When the run has ended.</p>`;
    if (data?.missing) return html`<p class="muted">None.</p>`;
    return children(data);
  };
  return html`<div class="card" data-testid=${testid}><h2>${title}</h2>
    <${Loading} state=${state}>${shown}<//>
  </div>`;
}

function Receipt({ threadId, runId, ended }) {
  return html`<${Optional} title="Receipt" testid="receipt" path=${`/threads/${threadId}/runs/${runId}/receipt`} ended=${ended}>${(receipt) => html`
    <p>verdict <${Status} value=${receipt.verdict} /> ${receipt.verdict_reason ? html`<span class="muted">${receipt.verdict_reason}</span>` : null}</p>
    <details><summary>the whole receipt</summary><${Json} value=${receipt} /></details>`}<//>`;
}

function Changes({ threadId, runId, ended }) {
  return html`<${Optional} title="Workspace changes" testid="changes" path=${`/threads/${threadId}/runs/${runId}/workspace-changes`} ended=${ended}>${(changes) => {
    const rows = ["created", "modified", "deleted"].flatMap((kind) => (changes[kind] || []).map((file) => [kind, file]));
    return rows.length
      ? html`<table><tbody>${rows.map(([kind, file]) => html`<tr data-change=${kind}><td>${kind}</td><td class="mono">${file.path ?? file}</td><td>${file.size ?? ""}</td></tr>`)}</tbody></table>`
      : html`<p class="muted">No file changed.</p>`;
  }}<//>`;
}

function Outputs({ threadId, ended }) {
  return html`<${Optional} title="Outputs" testid="outputs" path=${`/threads/${threadId}/outputs`} ended=${ended}>${(outputs) => {
    const files = Array.isArray(outputs) ? outputs : outputs.files || outputs.outputs || [];
    return files.length
      ? html`<ul>${files.map((file) => {
          const path = file.path ?? file;
          return html`<li><button class="link" onClick=${() => download(`/threads/${threadId}/outputs/${path.split("/").map(encodeURIComponent).join("/")}`, path.split("/").pop())}>${path}</button> <span class="muted">${file.size ?? ""}</span></li>`;
        })}</ul>`
      : html`<p class="muted">Nothing delivered.</p>`;
  }}<//>`;
}

function Deliveries({ threadId, runId, ended }) {
  return html`<${Optional} title="Webhook deliveries" testid="deliveries" path=${`/threads/${threadId}/runs/${runId}/deliveries`} ended=${ended}>${(data) => {
    const rows = Array.isArray(data) ? data : data.deliveries || [];
    return rows.length
      ? html`${rows.map((d) => html`<div class="card"><div class="spread"><span class="mono">${d.url}</span><${Status} value=${d.state} /></div>
          <table><thead><tr><th>attempt</th><th>when</th><th>status</th><th>error</th></tr></thead><tbody>
          ${(d.attempts || []).map((a) => html`<tr><td>${a.attempt}</td><td>${when(a.sent_at)}</td><td>${a.status_code ?? ""}</td><td>${a.error ?? ""}</td></tr>`)}
          </tbody></table></div>`)}`
      : html`<p class="muted">No webhook for this run.</p>`;
  }}<//>`;
}
