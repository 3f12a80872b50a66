// View of jaxtrace_nb's trace table, for the live widget (anywidget) and the self-contained
// HTML report (a LocalModel over the data embedded in the page). The kernel (or the report
// writer) sends every row, already formatted, with the column spec; this view filters, sorts
// and pages them, and shows one function's history. Every string goes in through
// textContent, never as HTML. It imports nothing, so it works offline.

const NUMERIC = new Set(["int", "num", "seconds", "bar"]);

function h(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// Text that may wrap at spaces and after / [ or a . that is no decimal point: never inside a word or a
// number (`_views._BREAK_AFTER`).
function breakable(text) {
  const out = document.createDocumentFragment();
  String(text ?? "").split(/(?<=[/[])|(?<=\.)(?!\d)/).forEach((piece, i) => {
    if (i) out.appendChild(document.createElement("wbr"));
    out.appendChild(document.createTextNode(piece));
  });
  return out;
}

function code(text, className) {
  const node = h("code", className);
  node.appendChild(breakable(text));
  return node;
}

function seconds(value) {
  return value === null || value === undefined || Number.isNaN(value) ? "" : Number(value).toFixed(3);
}

// Rich text, worded by the kernel (`_rows`: the why, explanations, hints): blocks of
// [class, spans] (class "": inline), a span being [style, text] or [style, text, title].
// Only the markup of each style is decided here.
const STYLE_MARKUP = {
  code: ["code", ""], change: ["code", "jtnb-change"], count: ["span", "jtnb-count"], called: ["span", "jtnb-called"],
  cache: ["span", "jtnb-cache-label"],
};

function spans(list) {
  const out = document.createDocumentFragment();
  for (const [style, text, title] of list) {
    const [tag, className] = STYLE_MARKUP[style] || [];
    if (!tag) {
      out.appendChild(document.createTextNode(String(text ?? "")));
      continue;
    }
    const wraps = style === "called";  // a path: it wraps after / like a code span
    const node = tag === "code" ? code(text, className) : h(tag, className, wraps ? undefined : text);
    if (wraps) node.appendChild(breakable(text));
    if (title) node.title = title;
    out.appendChild(node);
  }
  return out;
}

function rich(blocks) {
  const out = document.createDocumentFragment();
  for (const [className, list] of blocks || []) {
    if (!className) {
      out.appendChild(spans(list));
      continue;
    }
    const block = h("div", className);
    block.appendChild(spans(list));
    out.appendChild(block);
  }
  return out;
}

const DRAW = {
  code: (td, v, row, column) => {
    if (v !== null && v !== undefined && v !== "") td.appendChild(code(v));
    if (column.name === "function" && row.nested) {
      const tag = h("span", "jtnb-tag", "nested");
      tag.title = "traced inside another jit: JAX reports no seconds of its own, the outer trace's include them";
      td.append(" ", tag);
    }
  },
  change: (td, v) => { if (v) td.appendChild(code(v, "jtnb-change")); },
  path: (td, v) => { td.appendChild(breakable(v)); },
  seconds: (td, v) => { td.textContent = seconds(v); },
  bar: (td, v, row, column, scale) => {
    const bar = h("span", "jtnb-bar");
    bar.style.width = `${scale > 0 && v ? Math.round((80 * v) / scale) : 0}px`;
    td.append(bar, seconds(v));
  },
  num: (td, v) => { td.textContent = v === null || v === undefined ? "" : Number(v).toPrecision(3); },
  cache: (td, v) => { td.textContent = v === null || v === undefined ? "" : String(v); },
  rich: (td, v) => { td.appendChild(rich(v)); },
};

// A column's classes, as the static HTML has them (`_views._css`): its name, numeric, collapsible.
function css(column) {
  return `jtnb-c-${column.name}${NUMERIC.has(column.kind) ? " jtnb-n" : ""}${column.collapse === "narrow" ? " jtnb-narrow" : ""}`;
}

// The columns less those left out where empty (`_report.Column.collapse`) that no row has a value of.
function shown(columns, rows) {
  const has = (v) => v !== null && v !== undefined && v !== "";
  return columns.filter((c) => c.collapse !== "empty" || rows.some((r) => has(r[c.name])));
}

function cell(column, row, scale) {
  const td = h("td", css(column));
  const value = row[column.name];
  const draw = DRAW[column.kind];
  if (draw) draw(td, value, row, column, scale);
  else td.textContent = value === null || value === undefined ? "" : String(value);
  const full = row.full && row.full[column.name];
  if (full) td.title = full;
  return td;
}

function head(columns, onSort) {
  const thead = h("thead");
  const tr = h("tr");
  for (const column of columns) {
    const th = h("th", css(column), column.label);
    th.title = column.title;
    th.dataset.column = column.name;
    if (onSort) {
      th.classList.add("jtnb-sortable");
      th.addEventListener("click", () => onSort(column));
    }
    tr.appendChild(th);
  }
  thead.appendChild(tr);
  return thead;
}

function pager(page, size, total, onPage) {
  const box = h("div", "jtnb-pager");
  const pages = Math.max(1, Math.ceil(total / size));
  const prev = h("button", "jtnb-prev", "‹ prev");
  const next = h("button", "jtnb-next", "next ›");
  prev.disabled = page <= 0;
  next.disabled = page >= pages - 1;
  prev.addEventListener("click", () => onPage(page - 1));
  next.addEventListener("click", () => onPage(page + 1));
  const first = total ? page * size + 1 : 0;
  box.append(prev, h("span", "jtnb-range", `${first}–${Math.min(total, (page + 1) * size)} of ${total}`), next);
  return box;
}

// Every row, parsed once per change of the JSON text the kernel sends.
const PARSED = new WeakMap();
function allRows(model) {
  const text = model.get("rows_json");
  let parsed = PARSED.get(model);
  if (!parsed || parsed.text !== text) PARSED.set(model, (parsed = { text, rows: JSON.parse(text) }));
  return parsed.rows;
}

// Rows the toggle and the filter let through (every word of the filter must match), sorted;
// blanks last in either direction.
function visibleRows(model) {
  const words = model.get("filter").toLowerCase().split(/\s+/).filter(Boolean);
  const showAll = model.get("show_all");
  const rows = allRows(model).filter((r) => (showAll || !r.hidden) && words.every((w) => r.search.includes(w)));
  const name = model.get("sort_by");
  const column = model.get("columns").find((c) => c.name === name);
  const numeric = column && NUMERIC.has(column.kind);
  // (rich text, the why, is not ordered: rows with one keep their order, before the blank ones)
  const key = (r) => (numeric ? r[name] : typeof r[name] === "object" ? "" : String(r[name] ?? "").toLowerCase());
  const blank = (r) => r[name] === null || r[name] === undefined || r[name] === "";
  const present = rows.filter((r) => !blank(r));
  present.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
  if (model.get("descending")) present.reverse();
  return present.concat(rows.filter(blank));
}

function controls(model, set) {
  const box = h("div", "jtnb-controls");
  const filter = h("input", "jtnb-filter");
  filter.type = "search";
  filter.placeholder = "filter: function, leaf, cause, In[n], test, file";
  filter.title = "shows the functions whose name, changed leaves, causes, cells, tests, locations or call sites " +
    "contain every word";
  let debounce = null; // while set, the box holds an edit the model has not seen yet
  filter.addEventListener("input", () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => {
      debounce = null;
      set({ filter: filter.value, page: 0 });
    }, 150);
  });
  const toggleLabel = h("label", "jtnb-toggle");
  const toggle = h("input");
  toggle.type = "checkbox";
  toggle.addEventListener("change", () => set({ show_all: toggle.checked, page: 0 }));
  toggleLabel.append(toggle, " internal functions");
  toggleLabel.title = "also list the jitted helpers of JAX and libraries (hidden by default)";
  box.append(filter, toggleLabel);
  const exports = model.get("exportable") ? exportControls(model) : [];
  box.append(...exports);
  const refresh = () => {
    toggle.checked = model.get("show_all");
    if (document.activeElement !== filter && debounce === null) filter.value = model.get("filter");
    for (const node of exports) node.refresh?.();
  };
  return { box, refresh, cleanup: () => clearTimeout(debounce) };
}

function exportControls(model) {
  const variable = h("input", "jtnb-variable");
  variable.type = "text";
  variable.size = 10;
  variable.title = "variable name for the DataFrame";
  const keys = () => visibleRows(model).map((r) => r.key);
  const toVariable = h("button", "jtnb-export-variable", "→ variable");
  toVariable.title = "put the events of the listed functions in this kernel variable (DataFrame)";
  toVariable.addEventListener("click", () => model.send({ export: "variable", name: variable.value, keys: keys() }));
  const toCsv = h("button", "jtnb-export-csv", "→ CSV");
  toCsv.title = "write the events of the listed functions to a CSV file next to the notebook";
  toCsv.addEventListener("click", () => model.send({ export: "csv", keys: keys() }));
  const status = h("span", "jtnb-status");
  variable.refresh = () => { if (document.activeElement !== variable) variable.value = model.get("variable"); };
  status.refresh = () => { status.textContent = model.get("status"); };
  return [variable, toVariable, toCsv, status];
}

function summaryTable(model, set, tbody, pagerBox) {
  const rows = visibleRows(model);
  const size = Math.max(1, model.get("page_size"));
  const page = Math.min(Math.max(0, model.get("page")), Math.max(0, Math.ceil(rows.length / size) - 1));
  const columns = shown(model.get("columns"), allRows(model));
  const scale = Math.max(0, ...rows.map((r) => r.compile_s || 0));
  const selected = model.get("selected");
  const trs = rows.slice(page * size, (page + 1) * size).map((row) => {
    const tr = h("tr", `jtnb-row${row.key === selected ? " jtnb-selected" : ""}${row.hidden ? " jtnb-internal" : ""}`);
    tr.dataset.key = row.key;
    tr.title = "click for this function's history";
    for (const column of columns) tr.appendChild(cell(column, row, scale));
    const open = h("button", "jtnb-open", row.key === selected ? "▾" : "▸");
    open.title = "show this function's history";
    tr.firstChild.prepend(open);
    tr.addEventListener("click", () => set({ selected: row.key === model.get("selected") ? "" : row.key }));
    return tr;
  });
  if (!trs.length) {
    const td = h("td", "jtnb-empty", model.get("filter") ? "no function matches the filter" : "no jitted function traced yet");
    td.colSpan = columns.length;
    trs.push(h("tr"));
    trs[0].appendChild(td);
  }
  tbody.replaceChildren(...trs);
  pagerBox.replaceChildren(...(rows.length > size ? [pager(page, size, rows.length, (p) => set({ page: p }))] : []));
}

function groupRows(model, group, open, toggle, groupColumns) {
  const tr = h("tr", `jtnb-group${open ? " jtnb-open-group" : ""}`);
  for (const column of groupColumns) tr.appendChild(cell(column, group, 0));
  const button = h("button", "jtnb-expand", `${open ? "▾" : "▸"} ${group.count} event(s)`);
  button.title = "list the events of this group";
  tr.firstChild.prepend(button, " ");
  tr.addEventListener("click", toggle);
  if (!open) return [tr];
  const sub = h("tr", "jtnb-events-row");
  const td = h("td");
  td.colSpan = groupColumns.length;
  const columns = shown(model.get("event_columns"), group.events);
  const table = h("table", "jtnb-table jtnb-events");
  const body = h("tbody");
  const scale = Math.max(0, ...group.events.map((e) => e.total_s || 0));
  for (const event of group.events) {
    const row = h("tr", `jtnb-event${event.slowest ? " jtnb-slowest" : ""}`);
    if (event.slowest) row.title = "the slowest trace of this function";
    for (const column of columns) row.appendChild(cell(column, event, scale));
    body.appendChild(row);
  }
  table.append(head(columns), body);
  td.appendChild(table);
  if (group.omitted) td.appendChild(h("div", "jtnb-note", `… ${group.omitted} earlier event(s) in jt.log()`));
  sub.appendChild(td);
  return [tr, sub];
}

function historyPanel(model, box, opened) {
  const history = model.get("history");
  if (!model.get("selected") || !history.groups || !history.groups.length) {
    box.replaceChildren();
    return;
  }
  const title = h("div", "jtnb-history-title");
  title.append(h("b", "", history.title), " ");
  const close = h("button", "jtnb-close", "×");
  close.title = "close";
  close.addEventListener("click", () => { model.set("selected", ""); model.save_changes(); });
  title.append(close);
  const note = h("div", "jtnb-note", `${history.note} · repeats grouped by cause and leaf: click a group for its events`);
  const body = h("tbody");
  const groupColumns = shown(model.get("group_columns"), history.groups);
  for (const group of history.groups) {
    const id = `${history.key}:${group.first_seq}`;
    const toggle = () => { opened.has(id) ? opened.delete(id) : opened.add(id); historyPanel(model, box, opened); };
    body.append(...groupRows(model, group, opened.has(id), toggle, groupColumns));
  }
  const table = h("table", "jtnb-table jtnb-groups");
  table.append(head(groupColumns), body);
  const scroll = h("div", "jtnb-scroll");
  scroll.appendChild(table);
  box.replaceChildren(title, note, scroll, ...whereBoxes(history));
}

// Where the function's compile time goes (`_where`): the equations per source line of its largest
// trace, as a bar list, and the shape census of its leaves with the suggested padding.
function whereBoxes(history) {
  const out = [];
  const profile = history.profile;
  if (profile && profile.rows && profile.rows.length) {
    const box = h("div", "jtnb-profile");
    const title = h("div", "jtnb-profile-title", profile.title);
    title.title = profile.note;
    const body = h("tbody");
    for (const row of profile.rows) {
      const tr = h("tr");
      const where = h("td", "jtnb-c-location");
      where.appendChild(code(row.location));
      const bar = h("span", "jtnb-bar");
      bar.style.width = `${Math.round(120 * (row.share || 0))}px`;
      const count = h("td", "jtnb-n");
      count.append(bar, row.text);
      tr.append(where, count);
      body.appendChild(tr);
    }
    const table = h("table", "jtnb-table jtnb-profile-table");
    table.appendChild(body);
    box.append(title, table);
    if (profile.other) box.appendChild(h("div", "jtnb-note", `${profile.other} equation(s) elsewhere`));
    out.push(box);
  }
  if (history.census && history.census.length) {
    const box = h("div", "jtnb-census");
    box.appendChild(h("div", "jtnb-profile-title", "shape census: the shapes that compiled, and the padding that would have compiled fewer"));
    for (const item of history.census) {
      const line = h("div", "jtnb-census-line", item.text);
      if (item.code) line.append(" ", code(item.code));
      box.appendChild(line);
    }
    out.push(box);
  }
  return out;
}

// The compiles over wall time: an SVG the kernel drew (`_timeline.svg`, every text escaped),
// parsed as SVG (never as HTML), drawn and shown on demand.
function timelineBox(model) {
  const box = h("details", "jtnb-timeline-box");
  const summary = h("summary", "jtnb-note");
  box.appendChild(summary);
  const holder = h("div", "jtnb-scroll");
  box.appendChild(holder);
  box.open = Boolean(model.get("timeline_open"));
  box.addEventListener("toggle", () => {  // the kernel draws the SVG only while the box is open
    if (Boolean(model.get("timeline_open")) !== box.open) {
      model.set("timeline_open", box.open);
      model.save_changes();
    }
    if (box.open) draw();
  });
  let drawn = null;
  const draw = () => {
    const text = model.get("timeline_svg") || "";
    const caption = model.get("timeline_caption") || "";
    box.hidden = !caption;
    summary.textContent = `timeline: ${caption}`;
    if (!box.open || drawn === text) return;
    drawn = text;
    const doc = new DOMParser().parseFromString(text, "image/svg+xml");
    const svg = doc.documentElement;
    holder.replaceChildren(...(text && svg.nodeName === "svg" ? [document.importNode(svg, true)] : []));
  };
  draw();
  return { box, draw };
}

function render({ model, el }) {
  const started = performance.now();
  const set = (changes) => {
    for (const [name, value] of Object.entries(changes)) model.set(name, value);
    model.save_changes();
  };
  const root = h("div", "jtnb-widget jtnb-root");
  const top = h("div", "jtnb-top");
  const live = h("span", "jtnb-live");
  const headline = h("span", "jtnb-headline");
  top.append(live, headline);
  const bar = controls(model, set);
  const table = h("table", "jtnb-table jtnb-summary");
  const onSort = (column) => {
    if (model.get("sort_by") === column.name) set({ descending: !model.get("descending"), page: 0 });
    else set({ sort_by: column.name, descending: NUMERIC.has(column.kind), page: 0 });
  };
  const tbody = h("tbody");
  const scroll = h("div", "jtnb-scroll");
  scroll.appendChild(table);
  const pagerBox = h("div");
  const offer = h("div", "jtnb-note jtnb-offer", "▸ click a function for its history: every trace, repeats grouped, before → after");
  const historyBox = h("div", "jtnb-history");
  const timeline = timelineBox(model);
  root.append(top, bar.box, scroll, pagerBox, timeline.box, offer, historyBox);
  el.appendChild(root);
  const opened = new Set();

  const drawTop = () => {
    headline.textContent = model.get(model.get("show_all") ? "headline_all" : "headline");
    live.textContent = model.get("live") ? "● live" : "";
    bar.refresh();
  };
  const drawTable = () => {
    table.replaceChildren(head(shown(model.get("columns"), allRows(model)), onSort), tbody);
    for (const th of table.querySelectorAll("th")) {
      const active = th.dataset.column === model.get("sort_by");
      th.classList.toggle("jtnb-sorted", active);
      th.dataset.arrow = active ? (model.get("descending") ? "▼" : "▲") : "";
    }
    summaryTable(model, set, tbody, pagerBox);
  };
  const drawHistory = () => historyPanel(model, historyBox, opened);
  drawTop();
  drawTable();
  drawHistory();
  root.dataset.firstPageMs = (performance.now() - started).toFixed(1);

  // One listener per trait: not every frontend's model splits space-separated event names.
  const handlers = [];
  const listen = (names, handler) => names.forEach((name) => handlers.push([`change:${name}`, handler]));
  listen(["headline", "headline_all", "live", "status", "show_all", "filter", "variable"], drawTop);
  listen(["rows_json", "columns", "sort_by", "descending", "selected", "filter", "show_all", "page", "page_size"], drawTable);
  listen(["history"], drawHistory);
  listen(["timeline_svg", "timeline_caption"], timeline.draw);
  for (const [event, handler] of handlers) model.on(event, handler);
  return () => {
    bar.cleanup();
    for (const [event, handler] of handlers) model.off(event, handler);
  };
}

// The model of the self-contained report: the widget's state, and every function's history.
class LocalModel {
  constructor(state, histories) {
    this.state = { ...state };
    this.histories = histories;
    this.handlers = new Map();
  }

  get(name) {
    return this.state[name];
  }

  set(name, value) {
    this.state[name] = value;
    if (name === "selected") this.set("history", this.histories[value] || { groups: [] });
    for (const handler of this.handlers.get(`change:${name}`) || []) handler();
  }

  save_changes() {}

  send() {}

  on(event, handler) {
    this.handlers.set(event, [...(this.handlers.get(event) || []), handler]);
  }

  off(event, handler) {
    this.handlers.set(event, (this.handlers.get(event) || []).filter((f) => f !== handler));
  }
}

// anywidget's current form: a default export holding `render` (a named `render` export is deprecated).
// The self-contained report inlines this module and calls `render` and `LocalModel` directly.
export { LocalModel };
export default { render };
