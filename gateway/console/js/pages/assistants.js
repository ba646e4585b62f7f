// Assistants: list, create, edit (config, context, metadata), versions, graph.

import { html, useState } from "../../vendor/preact-htm.js";
import { api, get, patch, post } from "../api.js";
import { GraphDrawing } from "../graph.js";
import { ErrorBox, Json, Loading, Tabs, parseJson, short, useLoad, when } from "../ui.js";

export function AssistantsPage({ assistantId }) {
  const list = useLoad(() => post("/assistants/search", { limit: 100, sort_by: "updated_at", sort_order: "desc" }), []);
  return html`<section>
    <h1>Assistants</h1>
    <div class="grid">
      <div class="card">
        <${Loading} state=${list}>${(rows) => html`<table data-testid="assistants">
          <thead><tr><th>name</th><th>graph</th><th>version</th><th>updated</th></tr></thead>
          <tbody>${rows.map((a) => html`<tr key=${a.assistant_id} class=${a.assistant_id === assistantId ? "pick on" : "pick"} onClick=${() => (window.location.hash = `#/assistants/${a.assistant_id}`)}>
            <td><a href=${`#/assistants/${a.assistant_id}`}>${a.name}</a></td><td>${a.graph_id}</td><td>${a.version}</td><td>${when(a.updated_at)}</td>
          </tr>`)}</tbody></table>
          <${CreateForm} graphs=${[...new Set(rows.map((a) => a.graph_id))]} onCreated=${(a) => { list.reload(); window.location.hash = `#/assistants/${a.assistant_id}`; }} />`}<//>
      </div>
      ${assistantId ? html`<${AssistantDetail} key=${assistantId} assistantId=${assistantId} onChanged=${list.reload} />` : html`<div class="card muted">Pick an assistant to see its graph, edit it or see its versions.</div>`}
    </div>
  </section>`;
}

function CreateForm({ graphs, onCreated }) {
  const [open, setOpen] = useState(false);
  const [form, setForm] = useState({ graph_id: graphs[0] || "", name: "", context: "", config: "", metadata: "" });
  const [error, setError] = useState(null);
  const field = (name) => (e) => setForm({ ...form, [name]: e.target.value });
  const submit = async (event) => {
    event.preventDefault();
    try {
      const body = { graph_id: form.graph_id, name: form.name || undefined, metadata: parseJson(form.metadata, {}) };
      if (form.context.trim()) body.context = parseJson(form.context, {});
      if (form.config.trim()) body.config = parseJson(form.config, {});
      onCreated(await post("/assistants", body));
      setOpen(false);
    } catch (e) {
      setError(e);
    }
  };
  if (!open) return html`<p><button onClick=${() => setOpen(true)} data-testid="new-assistant">New assistant</button></p>`;
  return html`<form onSubmit=${submit} data-testid="create-assistant"><h3>New assistant</h3>
    <label>Graph <select name="graph_id" value=${form.graph_id} onChange=${field("graph_id")}>${graphs.map((g) => html`<option value=${g}>${g}</option>`)}</select></label>
    <label>Name <input name="name" value=${form.name} onInput=${field("name")} /></label>
    <label>Context (JSON) <textarea name="context" value=${form.context} onInput=${field("context")}></textarea></label>
    <label>Config (JSON) <textarea name="config" value=${form.config} onInput=${field("config")}></textarea></label>
    <label>Metadata (JSON) <textarea name="metadata" value=${form.metadata} onInput=${field("metadata")}></textarea></label>
    <div class="row"><button type="submit">Create</button><button type="button" class="secondary" onClick=${() => setOpen(false)}>Close</button></div>
    <${ErrorBox} error=${error} />
  </form>`;
}

function AssistantDetail({ assistantId, onChanged }) {
  const [tab, setTab] = useState("graph");
  const assistant = useLoad(() => get(`/assistants/${assistantId}`), [assistantId]);
  return html`<div class="card">
    <${Loading} state=${assistant}>${(a) => html`<h2>${a.name} <span class="muted">v${a.version} · ${a.graph_id} · <span class="mono">${short(a.assistant_id)}</span></span></h2>`}<//>
    <${Tabs} current=${tab} onPick=${setTab} tabs=${[["graph", "Graph"], ["edit", "Edit"], ["versions", "Versions"]]} />
    ${tab === "graph" && html`<${GraphTab} assistantId=${assistantId} />`}
    ${tab === "edit" && assistant.data && html`<${EditForm} assistant=${assistant.data} onSaved=${() => { assistant.reload(); onChanged(); }} />`}
    ${tab === "versions" && html`<${Versions} assistantId=${assistantId} onChanged=${() => { assistant.reload(); onChanged(); }} />`}
  </div>`;
}

function GraphTab({ assistantId }) {
  const [xray, setXray] = useState(false);
  const graph = useLoad(() => get(`/assistants/${assistantId}/graph`, { xray }), [assistantId, xray]);
  return html`<label class="inline"><input type="checkbox" checked=${xray} onChange=${(e) => setXray(e.target.checked)} /> subgraphs (xray)</label>
    <${Loading} state=${graph}>${(g) => html`<${GraphDrawing} graph=${g} />`}<//>`;
}

function EditForm({ assistant, onSaved }) {
  const show = (value) => JSON.stringify(value ?? {}, null, 2);
  const [form, setForm] = useState({ name: assistant.name, context: show(assistant.context), metadata: show(assistant.metadata) });
  const [error, setError] = useState(null);
  const [saved, setSaved] = useState(false);
  const field = (name) => (e) => setForm({ ...form, [name]: e.target.value });
  const submit = async (event) => {
    event.preventDefault();
    setSaved(false);
    try {
      await patch(`/assistants/${assistant.assistant_id}`, {
        name: form.name,
        context: parseJson(form.context, {}),
        metadata: parseJson(form.metadata, {}),
      });
      setError(null);
      setSaved(true);
      onSaved();
    } catch (e) {
      setError(e);
    }
  };
  return html`<form onSubmit=${submit} data-testid="edit-assistant">
    <label>Name <input name="name" value=${form.name} onInput=${field("name")} /></label>
    <label>Context (JSON; the config's configurable mirrors it) <textarea name="context" value=${form.context} onInput=${field("context")}></textarea></label>
    <label>Metadata (JSON) <textarea name="metadata" value=${form.metadata} onInput=${field("metadata")}></textarea></label>
    <button type="submit">Save as a new version</button>
    ${saved ? html` <span class="muted">Saved.</span>` : null}
    <${ErrorBox} error=${error} />
  </form>`;
}

function Versions({ assistantId, onChanged }) {
  const versions = useLoad(() => post(`/assistants/${assistantId}/versions`, { limit: 100 }), [assistantId]);
  const [error, setError] = useState(null);
  const makeLatest = async (version) => {
    try {
      await api("POST", `/assistants/${assistantId}/latest`, { body: { version } });
      versions.reload();
      onChanged();
    } catch (e) {
      setError(e);
    }
  };
  return html`<${ErrorBox} error=${error} /><${Loading} state=${versions}>${(rows) => html`<table data-testid="versions">
    <thead><tr><th>version</th><th>name</th><th>created</th><th>context</th><th></th></tr></thead>
    <tbody>${rows.map((v) => html`<tr key=${v.version}><td>${v.version}</td><td>${v.name}</td><td>${when(v.created_at)}</td>
      <td><${Json} value=${v.context} /></td><td><button class="secondary" onClick=${() => makeLatest(v.version)}>Make current</button></td></tr>`)}</tbody></table>`}<//>`;
}
