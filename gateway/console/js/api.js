// The public HTTP API, as any client calls it. The key lives in this tab's
// sessionStorage only: never a cookie, never localStorage, never sent anywhere
// but this gateway.

const KEY_ITEM = "waybill.console.key";
const KIND_ITEM = "waybill.console.keyKind"; // "x-api-key" | "bearer"

// The API is the console's parent path (the gateway may sit under a prefix).
export const API_ROOT = new URL("..", window.location.href).pathname.replace(/\/$/, "");

export const credentials = {
  key: () => sessionStorage.getItem(KEY_ITEM) || "",
  kind: () => sessionStorage.getItem(KIND_ITEM) || "x-api-key",
  set(key, kind) {
    sessionStorage.setItem(KEY_ITEM, key);
    sessionStorage.setItem(KIND_ITEM, kind);
  },
  clear() {
    sessionStorage.removeItem(KEY_ITEM);
    sessionStorage.removeItem(KIND_ITEM);
  },
};

const unauthorizedListeners = new Set();
export function onUnauthorized(listener) {
  unauthorizedListeners.add(listener);
  return () => unauthorizedListeners.delete(listener);
}

export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${typeof detail === "string" ? detail : JSON.stringify(detail)}`);
    this.status = status;
    this.detail = detail;
  }
}

export function authHeaders(extra = {}) {
  const headers = { ...extra };
  const key = credentials.key();
  if (key) {
    if (credentials.kind() === "bearer") headers.Authorization = `Bearer ${key}`;
    else headers["x-api-key"] = key;
  }
  return headers;
}

export function url(path, query) {
  const target = `${API_ROOT}${path}`;
  if (!query) return target;
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value === undefined || value === null || value === "") continue;
    for (const one of Array.isArray(value) ? value : [value]) params.append(name, String(one));
  }
  const text = params.toString();
  return text ? `${target}?${text}` : target;
}

async function failure(response) {
  if (response.status === 401) unauthorizedListeners.forEach((listener) => listener());
  let detail = response.statusText;
  try {
    const body = await response.json();
    detail = body.detail ?? body.message ?? body;
  } catch {
    /* not JSON: keep the status text */
  }
  return new ApiError(response.status, detail);
}

/** fetch with the key; the Response (checked ok). */
export async function request(method, path, { body, query, headers, signal } = {}) {
  const init = { method, headers: authHeaders(headers), signal };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  const response = await fetch(url(path, query), init);
  if (!response.ok) throw await failure(response);
  return response;
}

/** The JSON answer of a call (null for 204). */
export async function api(method, path, options = {}) {
  const response = await request(method, path, options);
  if (response.status === 204) return null;
  const text = await response.text();
  return text.trim() ? JSON.parse(text) : null;
}

export const get = (path, query, options = {}) => api("GET", path, { ...options, query });
export const post = (path, body, options = {}) => api("POST", path, { ...options, body });
export const patch = (path, body, options = {}) => api("PATCH", path, { ...options, body });

/** Download a file the API serves (with the key), as the browser's own download. */
export async function download(path, name) {
  const response = await request("GET", path);
  const blob = await response.blob();
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = name;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

export const TERMINAL = new Set(["success", "error", "interrupted", "timeout"]);
