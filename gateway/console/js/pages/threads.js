// Threads: search by status and metadata, newest first.

import { html, useState } from "../../vendor/preact-htm.js";
import { post } from "../api.js";
import { ErrorBox, Loading, Status, ago, parseJson, short, useLoad } from "../ui.js";

const STATUSES = ["", "idle", "busy", "interrupted", "error"];

export function ThreadsPage() {
  const [status, setStatus] = useState("");
  const [metadataText, setMetadataText] = useState("");
  const [query, setQuery] = useState({ status: "", metadata: {} });
  const [error, setError] = useState(null);
  const threads = useLoad(
    () =>
      post("/threads/search", {
        status: query.status || undefined,
        metadata: query.metadata,
        limit: 100,
        sort_by: "updated_at",
        sort_order: "desc",
      }),
    [query],
  );
  const search = (event) => {
    event.preventDefault();
    try {
      setQuery({ status, metadata: parseJson(metadataText, {}) });
      setError(null);
    } catch (e) {
      setError(new Error(`Metadata must be a JSON object: ${e.message}`));
    }
  };
  return html`<section>
    <div class="spread"><h1>Threads</h1><a class="button" href="#/chat">New chat</a></div>
    <form class="card row" onSubmit=${search}>
      <label>Status
        <select name="status" value=${status} onChange=${(e) => setStatus(e.target.value)}>
          ${STATUSES.map((s) => html`<option value=${s}>${s || "any"}</option>`)}
        </select>
      </label>
      <label style=${{ flex: 1 }}>Metadata contains (JSON)
        <input name="metadata" value=${metadataText} placeholder='{"user": "alice"}' onInput=${(e) => setMetadataText(e.target.value)} />
      </label>
      <button type="submit">Search</button>
    </form>
    <${ErrorBox} error=${error} />
    <div class="card">
      <${Loading} state=${threads}>${(rows) =>
        rows.length === 0
          ? html`<p class="muted">No threads.</p>`
          : html`<table data-testid="threads">
              <thead><tr><th>Thread</th><th>Status</th><th>Updated</th><th>Metadata</th></tr></thead>
              <tbody>
                ${rows.map(
                  (t) => html`<tr class="pick" key=${t.thread_id} onClick=${() => (window.location.hash = `#/threads/${t.thread_id}`)}>
                    <td><a class="mono" href=${`#/threads/${t.thread_id}`}>${short(t.thread_id)}</a></td>
                    <td><${Status} value=${t.status} /></td>
                    <td title=${t.updated_at}>${ago(t.updated_at)}</td>
                    <td class="mono">${Object.entries(t.metadata || {}).map(([k, v]) => html`<span class="pill">${k}: ${typeof v === "string" ? v : JSON.stringify(v)}</span>`)}</td>
                  </tr>`,
                )}
              </tbody>
            </table>`}<//>
    </div>
  </section>`;
}
