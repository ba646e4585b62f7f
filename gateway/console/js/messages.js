// A conversation rendered as a chat: markdown text, tool calls and their
// results folded, in a virtualized list (a thread may hold thousands).

import { html } from "../vendor/preact-htm.js";
import { Markdown, VirtualList } from "./ui.js";

export function textOf(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((block) => (typeof block === "string" ? block : block?.text ?? "")).join("");
  }
  return content == null ? "" : JSON.stringify(content);
}

const ROLE = { human: "you", user: "you", ai: "assistant", assistant: "assistant", tool: "tool", system: "system" };

export function Message({ message }) {
  const kind = message.type || message.role || "ai";
  const text = textOf(message.content);
  const calls = message.tool_calls || [];
  if (kind === "tool") {
    return html`<div class="msg tool"><details>
      <summary>tool result · ${message.name || "tool"} ${message.status === "error" ? "(error)" : ""}</summary>
      <pre class="code">${text}</pre>
    </details></div>`;
  }
  return html`<div class=${`msg ${kind}`} data-kind=${kind}>
    <div class="who">${ROLE[kind] || kind}${message.streaming ? " · streaming…" : ""}</div>
    ${text ? html`<${Markdown} text=${text} />` : null}
    ${calls.map(
      (call) => html`<details class="call"><summary>calls <code>${call.name}</code></summary><pre class="code">${JSON.stringify(call.args, null, 2)}</pre></details>`,
    )}
  </div>`;
}

export function Conversation({ messages, height = "60vh", stickToEnd = true }) {
  const items = messages.map((message, index) => ({ key: message.id || `m${index}`, message }));
  return html`<${VirtualList}
    testid="messages"
    items=${items}
    height=${height}
    estimate=${56}
    stickToEnd=${stickToEnd}
    render=${(item) => html`<${Message} message=${item.message} />`}
  />`;
}
