// Chat: pick an assistant and talk to it. Tokens stream in (drawn once per
// animation frame); an interrupt (human in the loop) shows a form whose answer
// resumes the run.

import { html, useEffect, useRef, useState } from "../../vendor/preact-htm.js";
import { get, post } from "../api.js";
import { Conversation, textOf } from "../messages.js";
import { followRun } from "../sse.js";
import { ErrorBox, Json, Status, parseJson, short, useFrameBatcher, useLoad } from "../ui.js";

const STREAM_MODES = ["messages-tuple", "values", "updates"];

function takesMessages(schemas) {
  const schema = schemas?.input_schema || schemas?.state_schema;
  return !schema || Boolean(schema.properties?.messages);
}

export function ChatPage({ threadId: routeThread }) {
  const assistants = useLoad(() => post("/assistants/search", { limit: 100 }), []);
  const [assistantId, setAssistantId] = useState("lead_agent");
  const schemas = useLoad(() => get(`/assistants/${assistantId}/schemas`), [assistantId]);
  const [threadId, setThreadId] = useState(routeThread || null);
  const [messages, setMessages] = useState([]);
  const [values, setValues] = useState(null);
  const [text, setText] = useState("");
  const [run, setRun] = useState(null); // {run_id, state}
  const [tokens, setTokens] = useState(0);
  const [interrupts, setInterrupts] = useState([]);
  const [error, setError] = useState(null);
  const follow = useRef(null);
  const chatty = takesMessages(schemas.data);

  const loadThread = async (tid) => {
    const thread = await get(`/threads/${tid}`);
    setValues(thread.values);
    setMessages(thread.values?.messages || []);
    setInterrupts(Object.values(thread.interrupts || {}).flat());
    if (thread.metadata?.graph_id && !run) setAssistantId(thread.metadata.graph_id);
  };
  useEffect(() => {
    if (routeThread) loadThread(routeThread).catch(setError);
    return () => follow.current?.stop();
  }, [routeThread]);

  // Every event of one frame applied at once: one render per frame at most.
  const push = useFrameBatcher((batch) => {
    let added = 0;
    setMessages((current) => {
      let list = current;
      for (const { event, data } of batch) {
        if (event === "values" && Array.isArray(data?.messages)) {
          list = data.messages;
        } else if (event === "messages" && Array.isArray(data)) {
          const [chunk] = data;
          if (!chunk || !/ai/i.test(chunk.type || "")) continue;
          const at = list.findIndex((m) => m.id === chunk.id);
          const piece = textOf(chunk.content);
          if (piece) added += 1; // the last chunk carries usage, no text
          if (at < 0) list = [...list, { id: chunk.id, type: "ai", content: piece, streaming: true }];
          else {
            list = list.slice();
            list[at] = { ...list[at], content: textOf(list[at].content) + piece, streaming: true };
          }
        }
      }
      return list;
    });
    const last = batch.filter((e) => e.event === "values").pop();
    if (last) setValues(last.data);
    if (added) setTokens((n) => n + added);
  });

  const start = async (body) => {
    setError(null);
    setInterrupts([]);
    setTokens(0);
    let tid = threadId;
    if (!tid) {
      tid = (await post("/threads", { metadata: { source: "console" } })).thread_id;
      setThreadId(tid);
      window.history.replaceState(null, "", `#/chat/${tid}`);
    }
    const created = await post(`/threads/${tid}/runs`, {
      assistant_id: assistantId,
      stream_mode: STREAM_MODES,
      ...body,
    });
    setRun({ run_id: created.run_id, state: "running" });
    follow.current?.stop();
    const follower = followRun(tid, created.run_id, { onEvent: (event) => push(event) });
    follow.current = follower;
    const ended = await follower.done;
    setRun({ run_id: created.run_id, state: ended?.status || "stopped" });
    await loadThread(tid);
  };
  const send = (event) => {
    event.preventDefault();
    if (busy) return;
    const said = text;
    let input;
    try {
      input = chatty ? { messages: [{ role: "user", content: said }] } : parseJson(said, {});
    } catch (e) {
      setError(new Error(`The input must be JSON: ${e.message}`));
      return;
    }
    setText("");
    if (chatty) setMessages((list) => [...list, { id: `local-${Date.now()}`, type: "human", content: said }]);
    start({ input }).catch(setError);
  };
  const newChat = () => {
    follow.current?.stop();
    setThreadId(null);
    setMessages([]);
    setValues(null);
    setInterrupts([]);
    setRun(null);
    window.history.replaceState(null, "", "#/chat");
  };
  // Until the assistant's schemas are in, it is not known what its input is.
  const busy = run?.state === "running" || schemas.loading;
  return html`<section>
    <div class="spread">
      <h1>Chat</h1>
      <div class="row">
        <label>Assistant
          <select name="assistant" value=${assistantId} onChange=${(e) => setAssistantId(e.target.value)} disabled=${busy}>
            ${(assistants.data || []).map((a) => html`<option value=${a.graph_id === a.name && a.metadata?.created_by === "system" ? a.graph_id : a.assistant_id}>${a.name} (${a.graph_id})</option>`)}
          </select>
        </label>
        <button class="secondary" onClick=${newChat}>New chat</button>
      </div>
    </div>
    <p class="muted row">
      ${threadId ? html`thread <a class="mono" href=${`#/threads/${threadId}`}>${short(threadId)}</a>` : "a new thread"}
      ${run ? html` · run <a class="mono" href=${`#/threads/${threadId}/runs/${run.run_id}`}>${short(run.run_id)}</a> <${Status} value=${run.state} />` : null}
      · <span data-testid="streamed-tokens">${tokens}</span> tokens streamed
    </p>
    ${chatty
      ? html`<${Conversation} messages=${messages} height="55vh" />`
      : html`<div class="card"><h3>state</h3><${Json} value=${values} /></div>`}
    ${interrupts.length ? html`<${InterruptForm} interrupts=${interrupts} onResume=${(resume) => start({ command: { resume } }).catch(setError)} />` : null}
    <${ErrorBox} error=${error} />
    <form class="chat-input" onSubmit=${send}>
      <textarea name="message" placeholder=${chatty ? "Say something (Enter sends, Shift+Enter a new line)" : 'The run\'s input, as JSON: {"action": "deploy"}'}
        value=${text} onInput=${(e) => setText(e.target.value)}
        onKeyDown=${(e) => { if (e.key === "Enter" && !e.shiftKey && chatty) { e.preventDefault(); send(e); } }}></textarea>
      <button type="submit" disabled=${busy || (!text.trim() && chatty)}>Send</button>
    </form>
  </section>`;
}

function InterruptForm({ interrupts, onResume }) {
  const [answer, setAnswer] = useState("");
  const submit = (event) => {
    event.preventDefault();
    let value = answer;
    try {
      value = JSON.parse(answer);
    } catch {
      /* a plain string answer */
    }
    onResume(value);
  };
  return html`<form class="card interrupt" onSubmit=${submit} data-testid="interrupt">
    <h3>The run is waiting for you</h3>
    ${interrupts.map((i) => (typeof i.value?.question === "string"
      ? html`<p class="question">${i.value.question}</p>`
      : html`<${Json} value=${i.value} />`))}
    <label>Your answer (text, or JSON) <input name="resume" value=${answer} onInput=${(e) => setAnswer(e.target.value)} required /></label>
    <button type="submit">Resume</button>
  </form>`;
}
