// The console's shell: sign-in, navigation, and a hash router (#/threads/...),
// so every page is a link and the gateway serves one static index.

import { html, render, useEffect, useState } from "../vendor/preact-htm.js";
import { credentials, get, onUnauthorized } from "./api.js";
import { AssistantsPage } from "./pages/assistants.js";
import { ChatPage } from "./pages/chat.js";
import { OperationsPage } from "./pages/operations.js";
import { RunPage } from "./pages/run.js";
import { ThreadPage } from "./pages/thread.js";
import { ThreadsPage } from "./pages/threads.js";

const ROUTES = [
  [/^\/threads\/([^/]+)\/runs\/([^/]+)$/, (m) => html`<${RunPage} threadId=${m[1]} runId=${m[2]} />`],
  [/^\/threads\/([^/]+)$/, (m) => html`<${ThreadPage} threadId=${m[1]} />`],
  [/^\/threads$/, () => html`<${ThreadsPage} />`],
  [/^\/chat(?:\/([^/]+))?$/, (m) => html`<${ChatPage} threadId=${m[1]} />`],
  [/^\/assistants(?:\/([^/]+))?$/, (m) => html`<${AssistantsPage} assistantId=${m[1]} />`],
  [/^\/operations$/, () => html`<${OperationsPage} />`],
];

const NAV = [
  ["/threads", "Threads"],
  ["/chat", "Chat"],
  ["/assistants", "Assistants"],
  ["/operations", "Operations"],
];

function currentPath() {
  const path = window.location.hash.replace(/^#/, "").split("?")[0];
  return path || "/threads";
}

function SignIn({ onDone, reason }) {
  const [key, setKey] = useState("");
  const [kind, setKind] = useState("x-api-key");
  const submit = (event) => {
    event.preventDefault();
    credentials.set(key.trim(), kind);
    onDone();
  };
  return html`<form class="card signin" onSubmit=${submit}>
    <h2>Sign in</h2>
    <p class="muted">${reason || "This gateway has auth on."} The key stays in this tab only (sessionStorage).</p>
    <label>Key or token <input type="password" name="key" value=${key} onInput=${(e) => setKey(e.target.value)} autocomplete="off" required /></label>
    <label>Send as
      <select name="kind" value=${kind} onChange=${(e) => setKind(e.target.value)}>
        <option value="x-api-key">x-api-key header</option>
        <option value="bearer">Authorization: Bearer</option>
      </select>
    </label>
    <button type="submit">Sign in</button>
  </form>`;
}

function App() {
  const [path, setPath] = useState(currentPath());
  const [signIn, setSignIn] = useState(null); // null, or the reason to ask
  const [signedIn, setSignedIn] = useState(0); // re-mount pages after a sign-in
  const [version, setVersion] = useState("");
  useEffect(() => {
    const onHash = () => setPath(currentPath());
    window.addEventListener("hashchange", onHash);
    const off = onUnauthorized(() =>
      setSignIn(credentials.key() ? "That key was refused." : "This gateway has auth on."),
    );
    get("/info").then((info) => setVersion(info.version), () => {});
    return () => {
      window.removeEventListener("hashchange", onHash);
      off();
    };
  }, []);

  const match = ROUTES.map(([pattern, page]) => [path.match(pattern), page]).find(([m]) => m);
  // Keyed by the path: another run or thread is a fresh page, none of the last one's state.
  const page = match
    ? html`<div key=${path}>${match[1](match[0])}</div>`
    : html`<p>Nothing at ${path}. <a href="#/threads">Threads</a></p>`;
  const signOut = () => {
    credentials.clear();
    setSignIn("Signed out.");
  };
  return html`<div class="shell">
    <header class="top">
      <a class="brand" href="#/threads">Waybill <span class="muted">console ${version}</span></a>
      <nav>
        ${NAV.map(([href, label]) => html`<a href=${`#${href}`} class=${path.startsWith(href) ? "on" : ""}>${label}</a>`)}
      </nav>
      <span class="who">${credentials.key() ? html`<button class="link" onClick=${signOut}>Sign out</button>` : html`<button class="link" onClick=${() => setSignIn("Enter a key.")}>Key…</button>`}</span>
    </header>
    <main key=${signedIn}>
      ${signIn !== null
        ? html`<${SignIn} reason=${signIn} onDone=${() => {
            setSignIn(null);
            setSignedIn((n) => n + 1);
          }} />`
        : page}
    </main>
  </div>`;
}

const root = document.getElementById("app");
root.textContent = ""; // the "Loading…" placeholder
render(html`<${App} />`, root);
