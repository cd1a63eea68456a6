"use strict";
// The topic page's looks at the data: the message browser and the preview of the built-in table's
// first rows. Uses console.js's helpers (el, table, getJSON, ...); as there, every value from the
// server goes into the page as text, never as markup: keys, values and properties are user data.

// A key or value as the server decoded it: text, or hex marked as such; cut values say so.
function cellText(cell) {
  if (!cell) return "–";
  return (cell.format === "hex" ? "0x" + cell.value : cell.value) + (cell.truncated ? " … (" + bytes(cell.size) + ")" : "");
}

function properties(props) {
  return Object.entries(props || {}).map(([k, v]) => k + "=" + v).join(", ");
}

function previewSection(view) {
  if (!view.exists) return [el("p", {class: "note", id: "table-rows-note"}, view.note)];
  return [el("h3", {}, "First rows of the current snapshot"), view.rows.length ? table(
    [{label: "Partition", num: true}, {label: "Offset", num: true}, "Publish time", "Key", "Value", "Properties"],
    view.rows.map(r => el("tr", {"data-offset": r.offset}, num(r.partition), num(r.offset), td(when(r.publishTime)),
      td(cellText(r.key)), td(el("code", {}, cellText(r.value))), td(properties(r.properties)))),
    {id: "table-rows"}) : el("p", {class: "note", id: "table-rows-note"}, "the snapshot has no rows")];
}

// The message browser: the latest messages, or from an offset or a time, optionally with one key.
function messageBrowser(name) {
  const t = parseTopic(name);
  const path = "/console/api/messages/" + topicPath(name);
  const mode = el("select", {id: "browse-mode"}, el("option", {value: "latest"}, "latest"),
    el("option", {value: "offset"}, "from offset"), el("option", {value: "time"}, "from time"));
  const offset = el("input", {id: "browse-offset", type: "number", min: 0, value: 0, size: 10, hidden: ""});
  const time = el("input", {id: "browse-time", type: "datetime-local", step: 1, hidden: ""});
  const count = el("input", {id: "browse-count", type: "number", min: 1, max: 500, value: 20, size: 5});
  const key = el("input", {id: "browse-key", placeholder: "any key", size: 16});
  const partition = el("input", {id: "browse-partition", type: "number", min: 0, placeholder: "all", size: 5});
  const results = el("div", {id: "messages"});
  mode.addEventListener("change", () => { offset.hidden = mode.value !== "offset"; time.hidden = mode.value !== "time"; });
  const form = el("form", {id: "browse", class: "browse"},
    el("label", {}, "Show ", mode), offset, time, el("label", {}, "Count ", count), el("label", {}, "Key ", key),
    el("label", {}, "Partition ", partition), el("button", {type: "submit"}, "Browse"));
  const browse = async () => {
    const query = new URLSearchParams({count: count.value || "20"});
    if (mode.value === "offset") query.set("offset", offset.value || "0");
    if (mode.value === "time" && time.value) query.set("time", String(new Date(time.value).getTime()));
    if (key.value) query.set("key", key.value);
    if (partition.value !== "") query.set("partition", partition.value);
    results.replaceChildren(el("p", {class: "note"}, "reading…"));
    try {
      results.replaceChildren(...messagesView(await getJSON(path + "?" + query)));
    } catch (err) {
      results.replaceChildren(el("p", {class: "error", id: "messages-error"}, err.message));
    }
  };
  form.addEventListener("submit", event => { event.preventDefault(); browse(); });
  return {root: el("div", {"data-topic": t.local}, form, results), browse};
}

function messageValue(m) {
  if (m.format === "null") return el("span", {class: "note"}, "null");
  const text = m.format === "json" || m.format === "avro" ? JSON.stringify(m.value) :
    m.format === "hex" ? "0x" + m.value : String(m.value);
  return el("code", {}, text + (m.truncated ? " … (" + bytes(m.size) + ")" : ""));
}

function messagesView(view) {
  const out = [];
  if (!view.complete) out.push(el("p", {class: "warn", id: "messages-partial"},
    "stopped at the browser's bounds (" + bytes(view.readBytes) + " read): narrow the range"));
  if (!view.messages.length) return out.concat(el("p", {class: "note", id: "messages-none"}, "no messages"));
  out.push(table([{label: "Partition", num: true}, {label: "Offset", num: true}, "Message id", "Publish time", "Key",
                  "Properties", "Format", "Value"],
    view.messages.map(m => el("tr", {"data-offset": m.offset, "data-partition": m.partition},
      num(m.partition), num(m.offset), td(m.messageId), td(when(m.publishTime)),
      td(m.key === null ? "–" : (m.keyHex ? "0x" + m.key : m.key), "key"), td(properties(m.properties), "properties"),
      td(m.format + (m.schemaVersion === null ? "" : " v" + m.schemaVersion), "format"), td(messageValue(m), "value"))),
    {id: "messages-table"}));
  return out;
}
