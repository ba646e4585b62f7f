// One thread: its messages as a chat, its state, its checkpoint history (time
// travel: look at any checkpoint, fork a run from it) and its runs.

import { html, useState } from "../../vendor/preact-htm.js";
import { get, post } from "../api.js";
import { Conversation } from "../messages.js";
import { ErrorBox, Json, Loading, Status, Tabs, ago, parseJson, short, useLoad, when } from "../ui.js";

export function ThreadPage({ threadId }) {
  const [tab, setTab] = useState("chat");
  const thread = useLoad(() => get(`/threads/${threadId}`), [threadId]);
  const runs = useLoad(() => get(`/threads/${threadId}/runs`, { limit: 100 }), [threadId]);
  const assistantId =
    runs.data?.[0]?.assistant_id || thread.data?.metadata?.assistant_id || thread.data?.metadata?.graph_id || "";
  return html`<section>
    <div class="spread">
      <h1>Thread <span class="mono">${threadId}</span></h1>
      <a class="button secondary" href=${`#/chat/${threadId}`}>Continue in chat</a>
    </div>
    <${Loading} state=${thread}>${(t) => html`<div class="card"><dl class="kv">
      <dt>status</dt><dd><${Status} value=${t.status} /></dd>
      <dt>created</dt><dd>${when(t.created_at)}</dd>
      <dt>updated</dt><dd>${when(t.updated_at)}</dd>
      <dt>metadata</dt><dd class="mono">${JSON.stringify(t.metadata)}</dd>
      ${Object.keys(t.interrupts || {}).length ? html`<dt>interrupts</dt><dd class="mono">${JSON.stringify(t.interrupts)}</dd>` : null}
    </dl></div>`}<//>
    <${Tabs} current=${tab} onPick=${setTab} tabs=${[["chat", "Chat"], ["state", "State"], ["history", "History"], ["runs", "Runs"]]} />
    ${tab === "chat" && html`<${Loading} state=${thread}>${(t) => html`<${Conversation} messages=${t.values?.messages || []} />`}<//>`}
    ${tab === "state" && html`<${StateTab} threadId=${threadId} />`}
    ${tab === "history" && html`<${HistoryTab} threadId=${threadId} assistantId=${assistantId} />`}
    ${tab === "runs" && html`<${Loading} state=${runs}>${(rows) => html`<${RunsTable} threadId=${threadId} runs=${rows} />`}<//>`}
  </section>`;
}

function StateTab({ threadId }) {
  const state = useLoad(() => get(`/threads/${threadId}/state`), [threadId]);
  return html`<${Loading} state=${state}>${(s) => html`<div class="grid">
    <div class="card"><h3>values</h3><${Json} value=${s.values} /></div>
    <div class="card"><h3>next</h3><${Json} value=${s.next} /><h3>checkpoint</h3><${Json} value=${s.checkpoint} /><h3>tasks</h3><${Json} value=${s.tasks} /></div>
  </div>`}<//>`;
}

function HistoryTab({ threadId, assistantId }) {
  const history = useLoad(() => post(`/threads/${threadId}/history`, { limit: 100 }), [threadId]);
  const [picked, setPicked] = useState(null);
  const [forkInput, setForkInput] = useState("");
  const [forkAssistant, setForkAssistant] = useState(assistantId);
  const [error, setError] = useState(null);
  const fork = async () => {
    try {
      const run = await post(`/threads/${threadId}/runs`, {
        assistant_id: forkAssistant || assistantId,
        checkpoint_id: picked.checkpoint.checkpoint_id,
        input: parseJson(forkInput, null),
        stream_mode: ["values", "messages-tuple", "updates"],
      });
      window.location.hash = `#/threads/${threadId}/runs/${run.run_id}`;
    } catch (e) {
      setError(e);
    }
  };
  return html`<div class="grid">
    <div class="card"><h3>Checkpoints (newest first)</h3>
      <${Loading} state=${history}>${(rows) => html`<table data-testid="history">
        <thead><tr><th>step</th><th>checkpoint</th><th>source</th><th>next</th><th>created</th></tr></thead>
        <tbody>${rows.map((c) => html`<tr key=${c.checkpoint.checkpoint_id} class=${picked === c ? "pick on" : "pick"} onClick=${() => setPicked(c)}>
          <td>${c.metadata?.step}</td><td class="mono" title=${c.checkpoint.checkpoint_id}>…${c.checkpoint.checkpoint_id.slice(-8)}</td>
          <td>${c.metadata?.source}</td><td>${(c.next || []).join(", ")}</td><td>${ago(c.created_at)}</td>
        </tr>`)}</tbody></table>`}<//>
    </div>
    <div class="card">
      ${picked
        ? html`<h3>At checkpoint <span class="mono">…${picked.checkpoint.checkpoint_id.slice(-8)}</span> (step ${picked.metadata?.step})</h3>
          <${Json} value=${picked.values} />
          <h3>Fork a run from here</h3>
          <label>Assistant <input name="fork-assistant" value=${forkAssistant || assistantId} onInput=${(e) => setForkAssistant(e.target.value)} /></label>
          <label>Input (JSON, empty: continue from the checkpoint) <textarea name="fork-input" value=${forkInput} onInput=${(e) => setForkInput(e.target.value)}></textarea></label>
          <button onClick=${fork} data-testid="fork">Fork run</button>
          <${ErrorBox} error=${error} />`
        : html`<p class="muted">Pick a checkpoint to see the state then, and fork a run from it.</p>`}
    </div>
  </div>`;
}

export function RunsTable({ threadId, runs, showThread = false }) {
  if (!runs.length) return html`<p class="muted">No runs.</p>`;
  return html`<table data-testid="runs">
    <thead><tr>${showThread ? html`<th>thread</th>` : null}<th>run</th><th>status</th><th>assistant</th><th>created</th><th>tokens</th></tr></thead>
    <tbody>${runs.map((r) => {
      const tid = r.thread_id || threadId;
      return html`<tr key=${r.run_id} class="pick" onClick=${() => (window.location.hash = `#/threads/${tid}/runs/${r.run_id}`)}>
        ${showThread ? html`<td class="mono">${short(tid)}</td>` : null}
        <td><a class="mono" href=${`#/threads/${tid}/runs/${r.run_id}`}>${short(r.run_id)}</a></td>
        <td><${Status} value=${r.stuck ? "stuck" : r.status} />${r.stuck ? html` <span class="muted">${r.status}</span>` : null}</td>
        <td>${r.assistant_id}</td><td title=${r.created_at}>${ago(r.created_at)}</td>
        <td>${r.usage?.total_tokens ?? ""}</td>
      </tr>`;
    })}</tbody></table>`;
}
