"use strict";
// The Nereus web console: pages built from the admin API (/admin/v2) and the console's JSON
// (/console/api). Every value from the server goes into the page as text (textContent or a
// text node), never as markup: topic, subscription and group names are user input.

const POLL_MS = 3000;
const TABLE_EVERY = 5; // polls between reloads of a topic's built-in table
const PREVIEW_ROWS = 20; // rows of a built-in table's preview
const MAX_TOPICS = 200; // topics whose stats the overview fetches
const COLORS = {in: "#1f6feb", out: "#12b76a", backlog: "#f79009"};

let page = 0; // bumped on navigation: polls of the previous page stop
let overview = null;

// -- DOM and formatting --------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined) continue;
    if (key === "class") node.className = value;
    else if (key === "href") node.setAttribute("href", value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(headers, rows, attrs) {
  const head = el("tr", {}, headers.map(h => el("th", {class: h.num ? "num" : null}, h.label || h)));
  return el("table", attrs || {}, el("thead", {}, head), el("tbody", {}, rows));
}

function td(value, cls) { return el("td", {class: cls || null}, value); }
function num(value) { return el("td", {class: "num"}, value); }

function rate(v) { return Number(v || 0).toFixed(1); }
function count(v) { return v === null || v === undefined ? "–" : Number(v).toLocaleString("en"); }
function bytes(v) {
  v = Number(v || 0);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i || !Number.isInteger(v) ? v.toFixed(1) : String(v)) + " " + units[i];
}
function bytesRate(v) { return bytes(v) + "/s"; }
function when(ms) { return ms ? new Date(ms).toLocaleString() : "–"; }
function ranges(r) { return (r || []).map(([a, b]) => "[" + a + ", " + b + ")").join(" "); }

function setStatus(text) { document.getElementById("status").textContent = text || ""; }

function section(title, ...children) { return [el("h2", {}, title), ...children]; }

// -- credentials --------------------------------------------------------------------------
// Under authentication the console makes its calls as the admin API's clients do: with an
// Authorization header (a token, or Basic user:password), entered in the sign-in form and
// kept for this tab only. A 401 answer brings the form back, with the server's reason.
const AUTH_KEY = "nereus.authorization";

function authorization() { return sessionStorage.getItem(AUTH_KEY); }

function base64(text) {
  return btoa(Array.from(new TextEncoder().encode(text), b => String.fromCharCode(b)).join(""));
}

function showSignOut() {
  document.getElementById("sign-out").hidden = !authorization();
}

function showSignIn(reason) {
  if (document.getElementById("sign-in")) return;
  page++; // the page's polls stop
  const method = el("select", {id: "sign-in-method"},
    el("option", {value: "token"}, "Token"), el("option", {value: "basic"}, "User and password"));
  const token = el("input", {id: "sign-in-token", type: "password", autocomplete: "off", size: 60});
  const user = el("input", {id: "sign-in-user", autocomplete: "username"});
  const password = el("input", {id: "sign-in-password", type: "password", autocomplete: "current-password"});
  const tokenRow = el("p", {}, el("label", {}, "Token ", token));
  const basicRows = el("div", {hidden: ""}, el("p", {}, el("label", {}, "User ", user)),
    el("p", {}, el("label", {}, "Password ", password)));
  method.addEventListener("change", () => {
    tokenRow.hidden = method.value !== "token";
    basicRows.hidden = method.value !== "basic";
  });
  const form = el("form", {id: "sign-in"}, el("h1", {}, "Sign in"),
    reason ? el("p", {class: "error"}, reason) : null,
    el("p", {}, el("label", {}, "Method ", method)), tokenRow, basicRows,
    el("p", {}, el("button", {type: "submit"}, "Sign in")));
  form.addEventListener("submit", event => {
    event.preventDefault();
    const value = method.value === "token" ? "Bearer " + token.value.trim()
      : "Basic " + base64(user.value + ":" + password.value);
    sessionStorage.setItem(AUTH_KEY, value);
    showSignOut();
    route();
    loadOverview().catch(err => setStatus(err.message));
  });
  document.getElementById("main").replaceChildren(form);
}

// -- data ---------------------------------------------------------------------------------
async function getJSON(path) {
  const headers = {Accept: "application/json"};
  const auth = authorization();
  if (auth) headers.Authorization = auth;
  const response = await fetch(path, {headers});
  const body = await response.json().catch(() => null);
  const reason = (body && body.reason) || response.status + " " + response.statusText;
  if (response.status === 401) showSignIn(reason);
  if (!response.ok) throw new Error(reason);
  return body;
}

const enc = encodeURIComponent;

function parseTopic(name) {
  const m = /^(persistent|non-persistent):\/\/([^/]+)\/([^/]+)\/(.+)$/.exec(name);
  if (!m) throw new Error("not a topic name: " + name);
  return {domain: m[1], tenant: m[2], namespace: m[3], local: m[4]};
}

function topicPath(name) {
  const t = parseTopic(name);
  return t.domain + "/" + enc(t.tenant) + "/" + enc(t.namespace) + "/" + enc(t.local);
}

function topicLink(name) { return el("a", {href: "#/topic/" + enc(name)}, name); }

// A partitioned topic is listed once (its partitions are rows of the admin listing too).
const partitioned = new Set();

async function namespaceTopics() {
  const tenants = await getJSON("/admin/v2/tenants");
  const out = [];
  for (const tenant of tenants) {
    for (const ns of await getJSON("/admin/v2/namespaces/" + enc(tenant))) {
      const base = "/admin/v2/persistent/" + ns.split("/").map(enc).join("/");
      const bases = await getJSON(base + "/partitioned");
      bases.forEach(b => partitioned.add(b));
      const plain = (await getJSON(base)).filter(n => !bases.includes(n.replace(/-partition-\d+$/, "")));
      out.push({namespace: ns, topics: bases.concat(plain).sort()});
    }
  }
  return out;
}

// Through the console's API: in a cluster a topic's stats live on its owner, another origin.
// Partitioned topics: Pulsar's partitioned-stats, which any broker answers for every partition.
function statsPath(name) {
  return "/console/api/stats/" + topicPath(name) + (partitioned.has(name) ? "?partitioned=true" : "");
}

// The broker's recent samples ([time, in, out, backlog]) into a rates chart and a backlog chart.
function showHistory(history, rates, backlog) {
  rates.show(history.samples.map(([time, i, o]) => ({time, in: i, out: o})));
  backlog.show(history.samples.map(([time, , , b]) => ({time, backlog: b})));
}

function subsBacklog(stats) {
  return Object.values(stats.subscriptions || {}).reduce((sum, s) => sum + (s.msgBacklog || 0), 0);
}

// -- polling ------------------------------------------------------------------------------
function poll(fn) {
  const mine = page; // route() bumped it for this page
  const tick = async () => {
    if (mine !== page) return;
    try {
      await fn();
      setStatus("");
    } catch (err) {
      if (mine === page) setStatus("update failed: " + err.message);
    }
    if (mine === page) setTimeout(tick, POLL_MS);
  };
  tick();
}

async function loadOverview() {
  overview = await getJSON("/console/api/overview");
  document.getElementById("cluster-info").textContent =
    "cluster " + overview.cluster + " · broker " + overview.broker + " · v" + overview.version;
  return overview;
}

// -- pages --------------------------------------------------------------------------------
function showOverview(main) {
  const brokers = el("div", {id: "brokers"});
  const traffic = new LineChart("chart-traffic", "Messages per second (all topics)",
    [{key: "in", label: "in", color: COLORS.in}, {key: "out", label: "out", color: COLORS.out}], rate);
  const backlog = new LineChart("chart-backlog", "Backlog (messages, all subscriptions)",
    [{key: "backlog", label: "backlog", color: COLORS.backlog}], count);
  const topics = el("div", {id: "topics"});
  main.replaceChildren(el("h1", {}, "Overview"), ...section("Brokers", brokers),
    ...section("Traffic", el("div", {class: "charts"}, traffic.root, backlog.root)), ...section("Topics", topics));

  poll(async () => {
    const ov = await loadOverview();
    showHistory(await getJSON("/console/api/history"), traffic, backlog);
    brokers.replaceChildren(table(
      ["Broker", "State", "Zone", "Node", {label: "Topics owned", num: true}, "Pulsar", "Kafka", "Console", "Since"],
      ov.brokers.map(b => el("tr", {"data-broker": b.name},
        td(b.name + (b.local ? " (this broker)" : ""), "name"), td(b.state, "state-" + b.state), td(b.zone),
        num(b.nodeId), num(count((b.load || {}).topics)), td(b.pulsarUrl), td(b.kafkaAddress),
        td(/^https?:\/\//.test(b.httpUrl) ? el("a", {href: b.httpUrl + "/console"}, b.httpUrl) : b.httpUrl),
        td(when(b.startedMs)))),
      {id: "brokers-table"}));

    const groups = await namespaceTopics();
    const names = groups.flatMap(g => g.topics).slice(0, MAX_TOPICS);
    const stats = {};
    await Promise.all(names.map(async n => {
      stats[n] = await getJSON(statsPath(n)).catch(err => ({error: err.message}));
    }));
    const blocks = [];
    for (const g of groups) {
      const rows = g.topics.map(n => {
        const s = stats[n];
        if (!s) return el("tr", {"data-topic": n}, td(topicLink(n), "name"),
                          el("td", {colspan: 7, class: "note"}, "not shown"));
        if (s.error) return el("tr", {"data-topic": n}, td(topicLink(n), "name"), el("td", {colspan: 7, class: "error"}, s.error));
        const b = subsBacklog(s);
        return el("tr", {"data-topic": n}, td(topicLink(n), "name"), num(count((s.publishers || []).length)),
          num(count(Object.keys(s.subscriptions || {}).length)), el("td", {class: "num rate-in"}, rate(s.msgRateIn)),
          el("td", {class: "num rate-out"}, rate(s.msgRateOut)), num(bytesRate(s.msgThroughputIn)),
          el("td", {class: "num backlog"}, count(b)), num(bytes(s.storageSize)));
      });
      blocks.push(el("h3", {}, g.namespace), rows.length ? table(
        ["Topic", {label: "Producers", num: true}, {label: "Subscriptions", num: true}, {label: "In msg/s", num: true},
         {label: "Out msg/s", num: true}, {label: "In bytes/s", num: true}, {label: "Backlog", num: true},
         {label: "Storage", num: true}], rows, {"data-namespace": g.namespace}) : el("p", {class: "note"}, "no topics"));
    }
    topics.replaceChildren(...blocks);
  });
}

function consumersTable(consumers) {
  return table(["Consumer", "Address", {label: "Permits", num: true}, {label: "Unacked", num: true},
                {label: "Out msg/s", num: true}, {label: "Delivered", num: true}],
    consumers.map(c => el("tr", {"data-consumer": c.consumerName}, td(c.consumerName, "name"), td(c.address),
      num(count(c.availablePermits)), num(count(c.unackedMessages)), num(rate(c.msgRateOut)),
      num(count(c.msgOutCounter)))));
}

// The Kafka groups reading a topic: one row per group, its partitions' lag nested below.
function kafkaGroupsTable(groups) {
  const rows = [];
  for (const g of groups) {
    rows.push(el("tr", {"data-kafka-group": g.groupId}, td(el("a", {href: "#/groups"}, g.groupId), "name"),
      td(groupType(g)), td(g.state), num(count(g.members)), el("td", {class: "num lag"}, count(g.totalLag))));
    rows.push(el("tr", {class: "nested"}, el("td", {colspan: 5}, table(
      [{label: "Partition", num: true}, {label: "Committed", num: true}, {label: "Log end", num: true},
       {label: "Lag", num: true}, "Committed at"],
      g.partitions.map(o => el("tr", {"data-partition": o.partition}, num(o.partition), num(count(o.committedOffset)),
        num(count(o.logEndOffset)), el("td", {class: "num lag"}, count(o.lag)), td(when(o.commitTimestamp))))))));
  }
  return table(["Group", "Type", "State", {label: "Members", num: true}, {label: "Total lag", num: true}], rows,
               {id: "kafka-groups-table"});
}

function tablesPath(name) {
  const t = parseTopic(name);
  return "/console/api/tables/" + enc(t.tenant) + "/" + enc(t.namespace) + "/" + enc(t.local);
}

function tableSection(view) {
  const out = [el("p", {}, "Iceberg table ", el("code", {}, view.table), ": its data files are the topic's compacted objects.")];
  const cat = view.catalog;
  out.push(el("h3", {}, "Offsets covered by compacted objects"));
  const covered = Object.entries(view.coveredOffsets);
  out.push(covered.length ? table(["Partition", "Offsets [first, end)"],
    covered.map(([p, r]) => el("tr", {}, td(p === "-1" ? "(not partitioned)" : p), td(ranges(r)))), {id: "covered-offsets"})
    : el("p", {class: "note"}, "nothing compacted yet"));
  if (!cat.available || !cat.exists) {
    out.push(el("p", {class: cat.available ? "note" : "warn", id: "table-note"}, cat.note));
    return out;
  }
  out.push(el("h3", {}, "Snapshots"), table(
    ["Snapshot", "Time", "Operation", {label: "+files", num: true}, {label: "-files", num: true},
     {label: "Files", num: true}, {label: "Records", num: true}, "Offsets"],
    cat.snapshots.slice().reverse().map(s => el("tr", {"data-snapshot": s.snapshotId},
      td(String(s.snapshotId) + (s.snapshotId === cat.currentSnapshotId ? " (current)" : "")), td(when(s.timestampMs)),
      td(s.operation), num(count(s.addedDataFiles)), num(count(s.deletedDataFiles)), num(count(s.totalDataFiles)),
      num(count(s.totalRecords)), td(Object.entries(s.offsets).map(([p, r]) => p + ": " + ranges(r)).join("; ")))),
    {id: "snapshots"}));
  out.push(el("h3", {}, "Data files (" + cat.dataFileCount + ")"), table(
    ["Partition", {label: "Records", num: true}, {label: "Size", num: true}, "Path"],
    cat.dataFiles.map(f => el("tr", {}, td(f.partition === null ? "–" : f.partition), num(count(f.records)),
      num(bytes(f.bytes)), td(el("code", {}, f.path)))), {id: "data-files"}));
  return out;
}

async function showTopic(main, name) {
  let path;
  try { path = topicPath(name); } catch (err) { main.replaceChildren(el("p", {class: "error"}, err.message)); return; }
  const cards = el("div", {class: "cards", id: "topic-cards"});
  const rates = new LineChart("chart-topic-rates", "Messages per second",
    [{key: "in", label: "in", color: COLORS.in}, {key: "out", label: "out", color: COLORS.out}], rate);
  const backlog = new LineChart("chart-topic-backlog", "Backlog (messages)",
    [{key: "backlog", label: "backlog", color: COLORS.backlog}], count);
  const subs = el("div", {id: "subscriptions"});
  const kafkaGroups = el("div", {id: "kafka-groups"});
  const producers = el("div", {id: "producers"});
  const replication = el("div", {id: "replication"});
  const builtin = el("div", {id: "builtin-table"}, el("p", {class: "note"}, "loading…"));
  const browser = messageBrowser(name);
  main.replaceChildren(el("p", {}, el("a", {href: "#/"}, "← Overview")), el("h1", {id: "topic-name"}, name), cards,
    el("div", {class: "charts"}, rates.root, backlog.root), ...section("Subscriptions", subs),
    ...section("Kafka consumer groups", kafkaGroups), ...section("Producers", producers), ...section("Geo-replication", replication),
    ...section("Messages", browser.root),
    ...section("Built-in table", builtin));
  const mine = page;
  if (!overview) await loadOverview().catch(() => null);
  const meta = await getJSON("/admin/v2/" + path + "/partitions").catch(() => ({partitions: 0}));
  if (meta.partitions > 0) partitioned.add(name); else partitioned.delete(name);
  if (mine !== page) return; // navigated away meanwhile
  browser.browse(); // once: the latest messages; the form reads again on demand
  let polls = 0;
  poll(async () => {
    const s = await getJSON(statsPath(name));
    const b = subsBacklog(s);
    const card = (label, value, id) => el("div", {class: "card"}, el("div", {class: "label"}, label),
                                          el("div", {class: "value", id: id}, value));
    cards.replaceChildren(...[card("In msg/s", rate(s.msgRateIn), "topic-rate-in"),
      card("Out msg/s", rate(s.msgRateOut), "topic-rate-out"), card("In", bytesRate(s.msgThroughputIn)),
      card("Out", bytesRate(s.msgThroughputOut)), card("Backlog", count(b), "topic-backlog"),
      card("Published", count(s.msgInCounter), "topic-msg-in"), card("Storage", bytes(s.storageSize)),
      card("WAL", s.walProfile || "object", "topic-wal-profile"),
      s.walProfile && s.walProfile !== "object" ?
        card("Not uploaded", bytes(s.walUploadLagBytes) + " · " + s.walUploadLagSeconds.toFixed(1) + " s", "topic-wal-lag") : null,
      partitioned.has(name) ? card("Partitions", count((s.metadata || {}).partitions), "topic-partitions") : null].filter(Boolean));
    showHistory(await getJSON("/console/api/history/" + path), rates, backlog);
    const subRows = [];
    for (const [subName, sub] of Object.entries(s.subscriptions || {})) {
      subRows.push(el("tr", {"data-subscription": subName}, td(subName, "name"), td(sub.type),
        el("td", {class: "num backlog"}, count(sub.msgBacklog)), num(rate(sub.msgRateOut)),
        num(count(sub.unackedMessages)), num(count((sub.consumers || []).length)), td(sub.activeConsumerName || "–")));
      if ((sub.consumers || []).length) subRows.push(el("tr", {class: "nested"}, el("td", {colspan: 7}, consumersTable(sub.consumers))));
    }
    subs.replaceChildren(subRows.length ? table(["Subscription", "Type", {label: "Backlog", num: true},
      {label: "Out msg/s", num: true}, {label: "Unacked", num: true}, {label: "Consumers", num: true}, "Active consumer"],
      subRows, {id: "subscriptions-table"}) : el("p", {class: "note"}, "no subscriptions"));
    const t = parseTopic(name);
    const readers = await getJSON("/console/api/kafka/topic-groups/" + enc(t.tenant) + "/" + enc(t.namespace) + "/" +
                                  enc(t.local));
    kafkaGroups.replaceChildren(readers.groups.length ? kafkaGroupsTable(readers.groups)
      : el("p", {class: "note"}, "no Kafka group has committed offsets on this topic"));
    const pubs = s.publishers || [];
    producers.replaceChildren(pubs.length ? table(["Producer", {label: "Id", num: true}, "Address", "Access mode",
      {label: "In msg/s", num: true}, {label: "In bytes/s", num: true}],
      pubs.map(p => el("tr", {"data-producer": p.producerName}, td(p.producerName, "name"), num(p.producerId),
        td(p.address), td(p.accessMode), num(rate(p.msgRateIn)), num(bytesRate(p.msgThroughputIn)))),
      {id: "producers-table"}) : el("p", {class: "note"}, "no producers connected"));
    const remotes = Object.entries(s.replication || {});
    replication.replaceChildren(remotes.length ? table(["Remote cluster", "Connected", {label: "Out msg/s", num: true},
      {label: "Out bytes/s", num: true}, {label: "Backlog", num: true}, {label: "Delay s", num: true}, "Error"],
      remotes.map(([cluster, r]) => el("tr", {"data-remote": cluster}, td(cluster, "name"), td(r.connected ? "yes" : "no"),
        num(rate(r.msgRateOut)), num(bytesRate(r.msgThroughputOut)), el("td", {class: "num replication-backlog"},
        count(r.replicationBacklog)), num(count(r.replicationDelayInSeconds)), td(r.error || "–"))),
      {id: "replication-table"}) : el("p", {class: "note"}, "not replicated to another cluster"));
    if (polls++ % TABLE_EVERY === 0) {
      const view = await getJSON(tablesPath(name));
      const rows = view.catalog.exists ? await getJSON(tablesPath(name) + "/rows?limit=" + PREVIEW_ROWS) : null;
      builtin.replaceChildren(...tableSection(view), ...(rows ? previewSection(rows) : []));
    }
  });
}

// Kafka's two group protocols: JoinGroup/SyncGroup ("classic", whatever its protocol type) and KIP-848's.
function groupType(g) {
  if (g.groupType === "consumer") return "consumer (KIP-848)";
  return g.protocolType && g.protocolType !== "consumer" ? "classic (" + g.protocolType + ")" : "classic";
}

function showGroups(main) {
  const list = el("div", {id: "groups"});
  main.replaceChildren(el("h1", {}, "Kafka consumer groups"), list);
  poll(async () => {
    const {groups} = await getJSON("/console/api/kafka/groups");
    if (!groups.length) { list.replaceChildren(el("p", {class: "note"}, "no consumer groups")); return; }
    list.replaceChildren(...groups.map(g => el("section", {class: "group", "data-group": g.groupId},
      el("h2", {}, g.groupId),
      el("div", {class: "cards"},
        ...[["Type", groupType(g), "group-type"], ["State", g.state], ["Members", count(g.members.length)],
            [g.groupType === "consumer" ? "Epoch" : "Generation", g.generation],
            ["Assignor", g.protocol || "–", "group-assignor"], ["Total lag", count(g.totalLag)]].map(([label, value, cls]) =>
          el("div", {class: "card"}, el("div", {class: "label"}, label), el("div", {class: "value " + (cls || "")}, value)))),
      el("h3", {}, "Members"),
      g.members.length ? table(["Member", "Client", "Host", "Assigned partitions"],
        g.members.map(m => el("tr", {"data-member": m.memberId}, td(m.memberId, "name"), td(m.clientId), td(m.clientHost),
          td(m.assignment ? m.assignment.map(a => a.topic + " [" + a.partitions.join(", ") + "]").join("; ") : "–"))))
        : el("p", {class: "note"}, "no members"),
      el("h3", {}, "Committed offsets"),
      g.offsets.length ? table(["Topic", {label: "Partition", num: true}, {label: "Committed", num: true},
        {label: "Log end", num: true}, {label: "Lag", num: true}, "Committed at"],
        g.offsets.map(o => el("tr", {"data-partition": o.topic + ":" + o.partition}, td(o.topic, "name"), num(o.partition),
          num(count(o.committedOffset)), num(count(o.logEndOffset)), el("td", {class: "num lag"}, count(o.lag)),
          td(when(o.commitTimestamp)))))
        : el("p", {class: "note"}, "no committed offsets"))));
  });
}

// -- navigation ---------------------------------------------------------------------------
function route() {
  const main = document.getElementById("main");
  const hash = location.hash.slice(1) || "/";
  page++;
  setStatus("");
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.getAttribute("href") === "#" + hash);
  if (hash.startsWith("/topic/")) showTopic(main, decodeURIComponent(hash.slice("/topic/".length)));
  else if (hash === "/groups") showGroups(main);
  else showOverview(main);
}

window.addEventListener("hashchange", route);
document.getElementById("sign-out").addEventListener("click", event => {
  event.preventDefault();
  sessionStorage.removeItem(AUTH_KEY);
  location.reload();
});
showSignOut();
route();
if (!overview) loadOverview().catch(err => setStatus(err.message));
