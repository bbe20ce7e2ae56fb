// The sale page: plain JavaScript against the REST routes (same origin,
// behind nginx). Every failure message comes from the errorCode.
"use strict";

const MESSAGES = {
  SOLD_OUT: "Sold out.",
  DUPLICATE_ORDER: "You already bought this voucher.",
  IDEMPOTENCY_IN_FLIGHT: "Your order is still being placed: check your orders in a moment.",
  ORDER_EXPIRED: "Too late: the time to pay has run out.",
  ORDER_STATE: "This order can no longer do that.",
  NOT_STARTED: "The sale has not started yet.",
  ENDED: "The sale has ended.",
  TOO_MANY_REQUESTS: "Too many requests: wait a moment and try again.",
  UNAUTHORIZED: "Please log in.",
  UNAVAILABLE: "The service is busy: try again in a moment.",
  OVERLOADED: "Many people are buying right now: trying again in a moment.",
  BAD_GATEWAY: "The service cannot be reached: try again in a moment.",
  GATEWAY_TIMEOUT: "The service took too long: check your orders before trying again.",
  VALIDATION: "Please check what you typed.",
  NOT_FOUND: "No such voucher.",
  PATH_REQUIRED: "This sale needs a fresh page: reload and try again.",
  PATH_INVALID: "That purchase link was used: try again.",
  PATH_EXPIRED: "That purchase link expired: try again.",
  CHALLENGE_INVALID: "The check did not pass: try again.",
};
const TOKEN_KEY = "hmdp.token";
const $ = (id) => document.getElementById(id);

let vouchers = [];
let serverSkewMs = 0; // server clock minus ours, from the Date header
let pollTimer = null;

function token() { return localStorage.getItem(TOKEN_KEY); }

// `extra`: more request headers (an Idempotency-Key). The answer's JSON
// gets `retryable` when the request may be sent again: a network error, a
// 502, 503 or 504 (the gateway's: its instance may have done the work), or
// the same key still running.
async function call(method, path, body, extra) {
  const headers = Object.assign({}, extra);
  if (token()) headers.authorization = token();
  if (body !== undefined) headers["content-type"] = "application/json";
  let res;
  try {
    res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    return { success: false, errorCode: "UNAVAILABLE", retryable: true };
  }
  const date = Date.parse(res.headers.get("date") || "");
  if (!Number.isNaN(date)) serverSkewMs = date - Date.now();
  let json;
  try { json = await res.json(); } catch (e) { json = { success: false, errorCode: res.status >= 500 ? "UNAVAILABLE" : "VALIDATION" }; }
  if (res.status === 401) { localStorage.removeItem(TOKEN_KEY); showLoggedOut(); }
  json.retryable = res.status === 502 || res.status === 503 || res.status === 504 ||
    json.errorCode === "IDEMPOTENCY_IN_FLIGHT";
  // A busy service says when to come back: a crowd that all retries at
  // once, sooner, only meets the same full house.
  const retryAfter = Number(res.headers.get("retry-after"));
  if (Number.isFinite(retryAfter) && retryAfter > 0) json.retryAfterMs = retryAfter * 1000;
  return json;
}

// One key per click: a retry of the same click is the same order, and the
// service answers it with the first answer instead of a second order.
function newKey() {
  if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
  return Date.now().toString(36) + "-" + Math.random().toString(36).slice(2) + Math.random().toString(36).slice(2);
}

const RETRY_PAUSES_MS = [300, 700, 1500, 3000, 5000];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function say(text, ok) {
  const m = $("message");
  m.textContent = text;
  m.className = ok ? "ok" : "fail";
}

function failure(json) {
  return MESSAGES[json.errorCode] || json.errorMsg || "Something went wrong.";
}

function showLoggedOut() {
  $("login-panel").hidden = false;
  $("orders-panel").hidden = true;
  $("logout").hidden = true;
  $("whoami").textContent = "";
}

async function showLoggedIn() {
  const me = await call("GET", "/user/me");
  if (!me.success) return;
  $("login-panel").hidden = true;
  $("orders-panel").hidden = false;
  $("logout").hidden = false;
  $("whoami").textContent = me.data.nickName || "";
  loadOrders();
}

$("send-code").addEventListener("click", async () => {
  const phone = $("phone").value.trim();
  const json = await call("POST", "/user/code?phone=" + encodeURIComponent(phone));
  say(json.success ? "Code sent." : failure(json), json.success);
});

$("login-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const json = await call("POST", "/user/login", { phone: $("phone").value.trim(), code: $("code").value.trim() });
  if (!json.success) { say(failure(json), false); return; }
  localStorage.setItem(TOKEN_KEY, json.data);
  say("Logged in.", true);
  showLoggedIn();
  render();
});

$("logout").addEventListener("click", async () => {
  await call("POST", "/user/logout");
  localStorage.removeItem(TOKEN_KEY);
  showLoggedOut();
  render();
});

function fmtLeft(ms) {
  const s = Math.max(0, Math.ceil(ms / 1000));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return (h ? h + "h " : "") + (h || m ? m + "m " : "") + r + "s";
}

function phase(v, now) {
  if (now < Date.parse(v.beginTime)) return "soon";
  if (now >= Date.parse(v.endTime)) return "ended";
  return v.stock > 0 ? "on" : "soldout";
}

// Items are updated in place (not rebuilt) so a button being clicked is
// never swapped out under the pointer.
function render() {
  const now = Date.now() + serverSkewMs;
  const list = $("vouchers");
  const seckill = vouchers.filter((v) => v.stock !== undefined && v.stock !== null);
  const ids = new Set(seckill.map((v) => String(v.id)));
  for (const li of [...list.children]) {
    if (!ids.has(li.dataset.voucher || "")) li.remove();
  }
  if (!seckill.length) {
    const li = document.createElement("li");
    li.className = "muted";
    li.textContent = "No seckill vouchers in this shop.";
    list.append(li);
    return;
  }
  for (const v of seckill) {
    let li = list.querySelector(`li[data-voucher="${v.id}"]`);
    if (!li) {
      li = document.createElement("li");
      li.dataset.voucher = v.id;
      li.innerHTML = '<span class="title"></span><span class="stock"></span><span class="when muted"></span><button class="buy"></button>';
      const buy = li.querySelector(".buy");
      buy.addEventListener("click", () => order(v.id, buy));
      list.append(li);
    }
    const p = phase(v, now);
    li.querySelector(".title").textContent = v.title;
    li.querySelector(".stock").textContent = "Stock: " + v.stock;
    li.querySelector(".when").textContent = p === "soon" ? "Starts in " + fmtLeft(Date.parse(v.beginTime) - now)
      : p === "ended" ? "Ended" : "Ends in " + fmtLeft(Date.parse(v.endTime) - now);
    const buy = li.querySelector(".buy");
    buy.textContent = p === "soldout" ? "Sold out" : "Buy";
    if (!buy.dataset.busy) buy.disabled = !token();
    buy.title = token() ? "" : "Log in to buy";
  }
}

async function loadVouchers() {
  const shop = $("shop").value.trim() || "1";
  const json = await call("GET", "/voucher/list/" + encodeURIComponent(shop));
  if (!json.success) { say(failure(json), false); vouchers = []; render(); return; }
  vouchers = json.data || [];
  render();
}

// A challenge solved in a Web Worker: the page stays responsive, and the
// time it took is kept for anyone curious (window.lastSolve).
function solve(challenge) {
  return new Promise((resolve, reject) => {
    const worker = new Worker("pow-worker.js");
    worker.onmessage = (e) => { worker.terminate(); window.lastSolve = Object.assign({ difficulty: challenge.difficulty }, e.data); resolve(e.data.nonce); };
    worker.onerror = (e) => { worker.terminate(); reject(e); };
    worker.postMessage({ token: challenge.token, difficulty: challenge.difficulty });
  });
}

// A guarded voucher's way to its order: ask for a path; solve the
// challenge if one comes; wait in line, showing the place and when the
// page asks again, until the path comes. Returns the path, or the failed
// answer.
async function pathFor(voucherId) {
  const route = "/voucher-order/seckill/" + voucherId + "/path";
  let json = await call("POST", route);
  for (;;) {
    if (!json.success) {
      if (!json.retryable) return { failed: json };
      await sleep(1000);
      json = await call("POST", route);
      continue;
    }
    const data = json.data;
    if (data.path) return { path: data.path };
    if (data.challenge) {
      say("Checking you are a person…", true);
      const nonce = await solve(data.challenge);
      json = await call("POST", route, { challenge: data.challenge.token, nonce });
      continue;
    }
    say("In line: place " + data.position + "; looking again in " + fmtLeft(data.retryAfterMs) + ".", true);
    await sleep(data.retryAfterMs);
    json = await call("POST", route);
  }
}

async function order(voucherId, button) {
  button.disabled = true;
  button.dataset.busy = "1";
  const key = { "idempotency-key": newKey() };
  const voucher = vouchers.find((v) => v.id === voucherId);
  let target = "/voucher-order/seckill/" + voucherId;
  let json;
  if (voucher && voucher.guard && voucher.guard !== "none") {
    const found = await pathFor(voucherId);
    if (found.path) target += "/" + found.path; else json = found.failed;
  }
  if (!json) json = await call("POST", target, undefined, key);
  for (const pause of RETRY_PAUSES_MS) {
    if (!json.retryable) break;
    say("Still trying…", true);
    await sleep(Math.max(pause, json.retryAfterMs || 0));
    json = await call("POST", target, undefined, key);
  }
  delete button.dataset.busy;
  button.disabled = false;
  if (json.success) {
    say("Bought! Order " + json.data + ".", true);
    loadOrders();
  } else {
    say(failure(json), false);
  }
  loadVouchers();
}

async function loadOrders() {
  if (!token()) return;
  const json = await call("GET", "/voucher-order/mine?page=1");
  const list = $("orders");
  list.replaceChildren();
  if (!json.success) return;
  for (const o of json.data) {
    const li = document.createElement("li");
    li.className = "order";
    li.dataset.order = o.id;
    const what = document.createElement("span");
    what.className = "what";
    what.textContent = "Order " + o.id + " · voucher " + o.voucherId + " · " + (o.statusName || o.state);
    li.append(what);
    if (o.statusName === "UNPAID" && o.state === "CONFIRMED") {
      // Pay before the deadline, or cancel; the countdown ticks with the page.
      const left = document.createElement("span");
      left.className = "deadline muted";
      left.dataset.deadline = o.payDeadline;
      const pay = document.createElement("button");
      pay.className = "pay";
      pay.textContent = "Pay";
      pay.addEventListener("click", () => settle(o.id, "pay", { payType: 1 }, "Paid."));
      const cancel = document.createElement("button");
      cancel.className = "cancel";
      cancel.textContent = "Cancel";
      cancel.addEventListener("click", () => settle(o.id, "cancel", undefined, "Cancelled: the voucher is back on sale."));
      li.append(left, pay, cancel);
    }
    list.append(li);
  }
  tickDeadlines();
  if (!json.data.length) {
    const li = document.createElement("li");
    li.className = "muted";
    li.textContent = "No orders yet.";
    list.append(li);
  }
}

async function settle(orderId, what, body, done) {
  const json = await call("POST", "/voucher-order/" + orderId + "/" + what, body);
  say(json.success ? done : failure(json), json.success);
  loadOrders();
  loadVouchers();
}

// Each unpaid order's time left to pay; once it has run out, the orders are
// read again shortly after (the service cancels the order within seconds).
let reloadForExpiry = null;
function tickDeadlines() {
  const now = Date.now() + serverSkewMs;
  for (const el of document.querySelectorAll("#orders .deadline")) {
    const left = Date.parse(el.dataset.deadline) - now;
    if (left > 0) {
      el.textContent = "Pay within " + fmtLeft(left);
    } else {
      el.textContent = "Payment time is up";
      if (!reloadForExpiry) reloadForExpiry = setTimeout(() => { reloadForExpiry = null; loadOrders(); loadVouchers(); }, 1500);
    }
  }
}
setInterval(tickDeadlines, 1000);

// The countdown ticks every second; stock is fetched again every 2 s while
// a sale runs or is about to start.
setInterval(render, 1000);
function schedulePoll() {
  clearInterval(pollTimer);
  pollTimer = setInterval(() => {
    const now = Date.now() + serverSkewMs;
    if (vouchers.some((v) => v.stock !== undefined && ["on", "soon"].includes(phase(v, now)))) loadVouchers();
  }, 2000);
}

$("load").addEventListener("click", loadVouchers);
$("refresh-orders").addEventListener("click", loadOrders);
const fromUrl = new URLSearchParams(location.search).get("shop");
if (fromUrl) $("shop").value = fromUrl;
if (token()) showLoggedIn(); else showLoggedOut();
loadVouchers();
schedulePoll();
