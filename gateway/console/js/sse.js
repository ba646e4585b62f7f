// Server-sent events over fetch (EventSource cannot send an API key), and a
// run follower that resumes with Last-Event-ID after a drop, never showing an
// event twice.

import { ApiError, TERMINAL, authHeaders, get, url } from "./api.js";

/** Parse an SSE body into {id, event, data} objects (data JSON-decoded). */
export async function* readEvents(response, signal) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  const abort = () => reader.cancel().catch(() => {});
  signal?.addEventListener("abort", abort, { once: true });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
        const parsed = parseBlock(block);
        if (parsed) yield parsed;
      }
    }
  } finally {
    signal?.removeEventListener("abort", abort);
  }
}

function parseBlock(block) {
  let id = null;
  let event = "message";
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (!line || line.startsWith(":")) continue; // a heartbeat comment
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "id") id = value;
    else if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  if (id === null && data.length === 0) return null;
  const text = data.join("\n");
  let parsed = text;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    /* plain text data */
  }
  return { id, event, data: parsed };
}

const RETRY_MS = [250, 500, 1000, 2000, 4000];

/**
 * Follow a run's events from its first one to its end, through any gateway.
 * A dropped connection is resumed with Last-Event-ID (the last id seen), and
 * an event whose id is not past it is skipped, so each is delivered once.
 * Returns {stop, drop, done}: drop() cuts the current connection as a network
 * failure would (the console's "reconnect" button, and the browser tests).
 */
export function followRun(threadId, runId, { onEvent, onStatus } = {}) {
  let lastId = -1;
  let stopped = false;
  let current = null;
  let reconnects = 0;
  const path = `/threads/${threadId}/runs/${runId}/stream`;

  async function connectOnce() {
    current = new AbortController();
    const response = await fetch(url(path), {
      headers: authHeaders({ "Last-Event-ID": String(lastId), Accept: "text/event-stream" }),
      signal: current.signal,
    });
    if (!response.ok) {
      let detail = response.statusText;
      try {
        detail = (await response.json()).detail ?? detail;
      } catch {
        /* keep the status text */
      }
      throw new ApiError(response.status, detail);
    }
    onStatus?.({ state: "live", reconnects, lastId });
    for await (const event of readEvents(response, current.signal)) {
      const seq = event.id === null ? null : Number(event.id);
      if (seq !== null && seq <= lastId) continue; // already shown before a reconnect
      if (seq !== null) lastId = seq;
      onEvent?.(event, seq);
    }
  }

  async function ended() {
    const run = await get(`/threads/${threadId}/runs/${runId}`);
    return TERMINAL.has(run.status) ? run : null;
  }

  const done = (async () => {
    let failures = 0;
    while (!stopped) {
      try {
        await connectOnce();
        if (stopped) break;
        failures = 0;
        // A stream ends with its run, or when its gateway stops: ask which.
        const run = await ended();
        if (run) {
          onStatus?.({ state: "ended", reconnects, lastId, run });
          return run;
        }
      } catch (error) {
        if (stopped) break;
        if (error instanceof ApiError && error.status < 500) {
          onStatus?.({ state: "failed", reconnects, lastId, error });
          throw error;
        }
      }
      if (stopped) break;
      reconnects += 1;
      onStatus?.({ state: "reconnecting", reconnects, lastId });
      await new Promise((resolve) => setTimeout(resolve, RETRY_MS[Math.min(failures, 4)]));
      failures += 1;
    }
    onStatus?.({ state: "stopped", reconnects, lastId });
    return null;
  })();

  return {
    done,
    stop() {
      stopped = true;
      current?.abort();
    },
    drop() {
      current?.abort(); // not stopped: the loop reconnects from lastId
    },
  };
}
