// The JS langgraph-sdk contract: call every method of every sub-client of the
// pinned `@langchain/langgraph-sdk` Client against the gateway at argv[2], and
// print one JSON line per method. tests/e2e/test_js_sdk_contract.py runs this and
// checks each answer's shape.
//
// Output: first {"methods": [...]} (every method the SDK has, found from the
// sub-clients' prototypes), then one {"method", "result"} or {"method", "error",
// "status"} (the HTTP status, when the server refused) per method. A method with no entry in CALLS prints an error, so an SDK upgrade
// that adds one fails the test until it has an entry.

import { Client } from "@langchain/langgraph-sdk";

const client = new Client({ apiUrl: process.argv[2] });

const YEARLY = "0 9 1 1 *"; // far from the test's time: no cron fires during it
const NOTE = { owner: "contract-js", text: "remember me" }; // the `memory` graph's input
const NAMESPACE = ["contract-js", "notes"];

// ---- what the calls share, made once ----------------------------------------------------

async function makeWorld() {
  const mark = { suite: `contract-js-${Math.random().toString(16).slice(2, 10)}` };
  const assistant = await client.assistants.create({ graphId: "memory", metadata: mark, name: "contract" });
  const threadId = (await client.threads.create({ metadata: mark })).thread_id;
  const run = await client.runs.create(threadId, "memory", { input: NOTE });
  await client.runs.join(threadId, run.run_id);
  const cron = await client.crons.create("memory", { schedule: YEARLY, input: NOTE, metadata: mark });
  await client.store.putItem(NAMESPACE, "kept", { n: 0 });
  const [nested] = await client.assistants.search({ graphId: "nested", metadata: { created_by: "system" } });
  return {
    mark,
    assistantId: assistant.assistant_id,
    threadId,
    runId: run.run_id,
    cronId: cron.cron_id,
    nestedAssistantId: nested.assistant_id,
  };
}

// ---- small helpers the calls use --------------------------------------------------------

const newThread = async (w) => (await client.threads.create({ metadata: w.mark })).thread_id;

async function threadWithARun(w) {
  const threadId = await newThread(w);
  const run = await client.runs.create(threadId, "memory", { input: NOTE });
  await client.runs.join(threadId, run.run_id);
  return [threadId, run.run_id];
}

// A run still going when the next call comes: its tool waits 30 s (a cancel cuts
// it after the stack's short grace; 20,000 streamed tokens took under 0.4 s).
async function longRun(w) {
  const threadId = await newThread(w);
  const input = { messages: [{ role: "user", content: '/tool wait {"seconds": 30}' }] };
  const run = await client.runs.create(threadId, "lead_agent", { input });
  return [threadId, run.run_id];
}

async function collected(stream) {
  const parts = [];
  for await (const { event, data } of stream) parts.push({ event, data });
  return parts;
}

// Follow a thread's stream until a run on it sends its values: runs start on the
// thread one after another until the stream (connected at some point) sees one.
async function joinThreadStream(w) {
  const threadId = await newThread(w);
  const parts = [];
  let done = false;
  const follower = (async () => {
    try {
      for await (const { event, data } of client.threads.joinStream(threadId)) {
        parts.push({ event, data });
        if (event === "values") return parts;
      }
      return parts;
    } finally {
      done = true;
    }
  })();
  follower.catch(() => {}); // its failure is the call's, awaited below
  for (let i = 0; i < 20 && !done; i++) await client.runs.wait(threadId, "memory", { input: NOTE });
  return await follower;
}

async function threadStreamSession(w) {
  const session = client.threads.stream(await newThread(w), { assistantId: "memory" });
  try {
    const started = await session.run.start({ input: NOTE });
    return { started, output: await session.output };
  } finally {
    await session.close();
  }
}

// ---- the calls: one per SDK method --------------------------------------------------------

const CALLS = {
  // assistants
  "assistants.create": (w) =>
    client.assistants.create({ graphId: "memory", config: { configurable: { tone: "dry" } }, metadata: w.mark }),
  "assistants.get": (w) => client.assistants.get(w.assistantId),
  "assistants.update": (w) => client.assistants.update(w.assistantId, { metadata: { updated: "yes" } }),
  "assistants.delete": async (w) => {
    const doomed = await client.assistants.create({ graphId: "memory", metadata: w.mark });
    return client.assistants.delete(doomed.assistant_id);
  },
  "assistants.search": (w) => client.assistants.search({ metadata: w.mark }),
  "assistants.count": (w) => client.assistants.count({ metadata: w.mark }),
  "assistants.getVersions": (w) => client.assistants.getVersions(w.assistantId),
  "assistants.setLatest": (w) => client.assistants.setLatest(w.assistantId, 1),
  "assistants.getGraph": (w) => client.assistants.getGraph(w.assistantId),
  "assistants.getSchemas": (w) => client.assistants.getSchemas(w.assistantId),
  "assistants.getSubgraphs": (w) => client.assistants.getSubgraphs(w.nestedAssistantId),
  // threads
  "threads.create": (w) => client.threads.create({ metadata: w.mark }),
  "threads.get": (w) => client.threads.get(w.threadId),
  "threads.update": (w) => client.threads.update(w.threadId, { metadata: { updated: "yes" } }),
  "threads.delete": async (w) => client.threads.delete(await newThread(w)),
  "threads.search": (w) => client.threads.search({ metadata: w.mark }),
  "threads.count": (w) => client.threads.count({ metadata: w.mark }),
  "threads.copy": (w) => client.threads.copy(w.threadId),
  "threads.prune": async (w) => client.threads.prune([await newThread(w)]),
  "threads.getState": async (w) => {
    const latest = await client.threads.getState(w.threadId);
    return {
      latest,
      by_id: await client.threads.getState(w.threadId, latest.checkpoint.checkpoint_id),
      by_checkpoint: await client.threads.getState(w.threadId, latest.checkpoint),
    };
  },
  "threads.updateState": async (w) => {
    const [threadId] = await threadWithARun(w);
    const latest = await client.threads.updateState(threadId, { values: { text: "edited" } });
    const onCheckpoint = await client.threads.updateState(threadId, {
      values: { text: "edited again" },
      checkpoint: latest.checkpoint,
    });
    return { latest, on_checkpoint: onCheckpoint };
  },
  "threads.patchState": (w) => client.threads.patchState(w.threadId, { patched: "yes" }),
  "threads.getHistory": (w) => client.threads.getHistory(w.threadId, { limit: 5 }),
  "threads.joinStream": joinThreadStream,
  "threads.stream": threadStreamSession,
  // runs
  "runs.create": async (w) => {
    const run = await client.runs.create(w.threadId, "memory", { input: NOTE });
    await client.runs.join(w.threadId, run.run_id); // the shared thread left idle
    return run;
  },
  "runs.createBatch": () => client.runs.createBatch([{ assistantId: "memory", input: NOTE }]),
  "runs.wait": (w) => client.runs.wait(w.threadId, "memory", { input: NOTE }),
  "runs.stream": (w) =>
    collected(client.runs.stream(w.threadId, "memory", { input: NOTE, streamMode: ["values", "updates"] })),
  "runs.list": (w) => client.runs.list(w.threadId),
  "runs.get": (w) => client.runs.get(w.threadId, w.runId),
  "runs.join": (w) => client.runs.join(w.threadId, w.runId),
  "runs.joinStream": async (w) => {
    const threadId = await newThread(w);
    // Joining without Last-Event-ID follows live: the run starts a second later.
    const run = await client.runs.create(threadId, "memory", {
      input: NOTE,
      streamMode: ["values", "updates"],
      streamResumable: true,
      afterSeconds: 1,
    });
    return collected(client.runs.joinStream(threadId, run.run_id, { streamMode: "values" }));
  },
  "runs.cancel": async (w) => client.runs.cancel(...(await longRun(w)), true),
  "runs.cancelMany": async (w) => {
    const [threadId, runId] = await longRun(w);
    await client.runs.cancelMany({ threadId, runIds: [runId] });
    await client.runs.join(threadId, runId); // nothing left running behind the test
  },
  "runs.delete": async (w) => client.runs.delete(...(await threadWithARun(w))),
  // crons
  "crons.create": (w) => client.crons.create("memory", { schedule: YEARLY, input: NOTE, metadata: w.mark }),
  "crons.createForThread": (w) =>
    client.crons.createForThread(w.threadId, "memory", { schedule: YEARLY, input: NOTE, metadata: w.mark }),
  "crons.update": (w) => client.crons.update(w.cronId, { schedule: "0 10 1 1 *" }),
  "crons.search": (w) => client.crons.search({ metadata: w.mark }),
  "crons.count": (w) => client.crons.count({ metadata: w.mark }),
  "crons.delete": async (w) => {
    const doomed = await client.crons.create("memory", { schedule: YEARLY, input: NOTE, metadata: w.mark });
    return client.crons.delete(doomed.cron_id);
  },
  // store
  "store.putItem": () => client.store.putItem(NAMESPACE, "put", { n: 1 }),
  "store.getItem": async () => ({
    found: await client.store.getItem(NAMESPACE, "kept"),
    missing: await client.store.getItem(NAMESPACE, "never-put"),
  }),
  "store.deleteItem": async () => {
    await client.store.putItem(NAMESPACE, "doomed", { n: 0 });
    return client.store.deleteItem(NAMESPACE, "doomed");
  },
  "store.searchItems": () => client.store.searchItems(NAMESPACE),
  "store.listNamespaces": () => client.store.listNamespaces({ prefix: ["contract-js"] }),
};

// ---- every method the SDK has ----------------------------------------------------------

// `sub.method` for the own prototype methods of each sub-client. The SDK marks its
// internal members with a leading "~" (e.g. "~ui", the UI-component loader).
function sdkMethods() {
  const methods = [];
  for (const [name, sub] of Object.entries(client)) {
    if (name.startsWith("~") || !sub || typeof sub !== "object") continue;
    const proto = Object.getPrototypeOf(sub);
    for (const method of Object.getOwnPropertyNames(proto)) {
      if (method !== "constructor" && typeof proto[method] === "function") methods.push(`${name}.${method}`);
    }
  }
  return methods.sort();
}

// A call that neither answers nor fails (e.g. a stream session whose server side
// is missing) fails after this long, so that the rest still run.
const CALL_TIMEOUT_MS = 30_000;

function withTimeout(promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer in ${CALL_TIMEOUT_MS} ms`)), CALL_TIMEOUT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

// The SDK's own background requests (a stream session's event subscription) may
// fail where no caller awaits them: log them; the call they belong to fails itself.
process.on("unhandledRejection", (err) => console.error("unhandled rejection:", String(err)));

function print(line) {
  process.stdout.write(JSON.stringify(line) + "\n");
}

async function main() {
  const methods = sdkMethods();
  print({ methods });
  const world = await makeWorld();
  for (const method of methods) {
    const call = CALLS[method];
    if (!call) {
      print({ method, error: "no entry in CALLS (tests/js/contract.mjs)" });
      continue;
    }
    try {
      const result = await withTimeout(call(world));
      print({ method, result: result === undefined ? null : result });
    } catch (err) {
      print({ method, error: String(err?.message ?? err), status: err?.status ?? null });
    }
  }
  for (const method of Object.keys(CALLS)) {
    if (!methods.includes(method)) print({ method, error: "an entry for a method the SDK no longer has" });
  }
}

await main();
process.exit(0); // a failed stream session may leave a request open
