// View of jaxtrace_nb's trace table. The kernel sorts, filters and pages; this file draws
// one page and sends clicks back. Every string is set through textContent, never as HTML.
// It imports nothing, so it works offline.

const COLUMNS = [
  ["function", "function", "code"],
  ["location", "file:line", "text"],
  ["traces", "traces", "int"],
  ["compiles", "compiles", "int"],
  ["eqns", "eqns", "int"],
  ["loop_repeats", "loop ×", "int"],
  ["trace_s", "trace s", "s"],
  ["lower_s", "lower s", "s"],
  ["compile_s", "compile s", "bar"],
  ["total_s", "total s", "s"],
  ["last_cause", "last cause", "text"],
  ["last_leaf", "leaf", "code"],
];

const HISTORY = [
  ["cell", "cell", "int"],
  ["time", "time", "text"],
  ["trace_number", "#", "int"],
  ["cause", "cause", "text"],
  ["leaf", "leaf", "code"],
  ["change", "before → after", "code"],
  ["explanation", "why / hint", "why"],
  ["eqns", "eqns", "int"],
  ["flops", "FLOPs", "num"],
  ["cache_hit", "cache", "cache"],
  ["trace_s", "trace s", "s"],
  ["lower_s", "lower s", "s"],
  ["compile_s", "compile s", "s"],
  ["total_s", "total s", "bar"],
];

function h(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function seconds(value) {
  return value === null || value === undefined || Number.isNaN(value) ? "" : Number(value).toFixed(3);
}

function cell(name, kind, value, row, scale) {
  const td = h("td", `jtnb-c-${name}${kind === "text" || kind === "code" || kind === "why" ? "" : " jtnb-n"}`);
  if (kind === "code") {
    if (value !== null && value !== undefined && value !== "") td.appendChild(h("code", "", value));
  } else if (kind === "s") {
    td.textContent = seconds(value);
  } else if (kind === "bar") {
    const bar = h("span", "jtnb-bar");
    bar.style.width = `${scale > 0 ? Math.round((80 * (value || 0)) / scale) : 0}px`;
    td.appendChild(bar);
    td.appendChild(document.createTextNode(seconds(value)));
  } else if (kind === "num") {
    td.textContent = value === null || value === undefined ? "" : Number(value).toPrecision(3);
  } else if (kind === "cache") {
    td.textContent = value === true ? "hit" : value === false ? "miss" : "";
  } else if (kind === "why") {
    td.appendChild(h("div", "", value || ""));
    if (row.hint) td.appendChild(h("div", "jtnb-hint", `hint: ${row.hint}`));
  } else {
    td.textContent = value === null || value === undefined ? "" : String(value);
  }
  return td;
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
  const last = Math.min(total, (page + 1) * size);
  box.append(prev, h("span", "jtnb-range", `${first}–${last} of ${total}`), next);
  return box;
}

function render({ model, el }) {
  const started = performance.now();
  const set = (changes) => {
    for (const [name, value] of Object.entries(changes)) model.set(name, value);
    model.save_changes();
  };

  const root = h("div", "jtnb-widget");
  const top = h("div", "jtnb-top");
  const headline = h("div", "jtnb-headline");
  const live = h("span", "jtnb-live");
  top.append(live, headline);

  const controls = h("div", "jtnb-controls");
  const filter = h("input", "jtnb-filter");
  filter.type = "search";
  filter.placeholder = "filter functions and leaves";
  filter.value = model.get("filter");
  let debounce = null;
  filter.addEventListener("input", () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => set({ filter: filter.value, page: 0 }), 200);
  });
  const toggleLabel = h("label", "jtnb-toggle");
  const toggle = h("input");
  toggle.type = "checkbox";
  toggle.addEventListener("change", () => set({ show_all: toggle.checked, page: 0 }));
  toggleLabel.append(toggle, document.createTextNode(" JAX-internal and nested"));
  const variable = h("input", "jtnb-variable");
  variable.type = "text";
  variable.size = 10;
  variable.title = "variable name for the DataFrame";
  variable.value = model.get("variable");
  const toVariable = h("button", "jtnb-export-variable", "→ variable");
  toVariable.title = "put the events of the listed functions in this kernel variable (DataFrame)";
  toVariable.addEventListener("click", () => model.send({ export: "variable", name: variable.value }));
  const toCsv = h("button", "jtnb-export-csv", "→ CSV");
  toCsv.title = "write the events of the listed functions to a CSV file next to the notebook";
  toCsv.addEventListener("click", () => model.send({ export: "csv" }));
  const status = h("span", "jtnb-status");
  controls.append(filter, toggleLabel, variable, toVariable, toCsv, status);

  const table = h("table", "jtnb-table jtnb-summary");
  const thead = h("thead");
  const headRow = h("tr");
  for (const [name, label] of COLUMNS) {
    const th = h("th", "jtnb-sortable", label);
    th.dataset.column = name;
    th.title = "sort";
    th.addEventListener("click", () => {
      const numeric = !["function", "location", "last_cause", "last_leaf"].includes(name);
      if (model.get("sort_by") === name) set({ descending: !model.get("descending"), page: 0 });
      else set({ sort_by: name, descending: numeric, page: 0 });
    });
    headRow.appendChild(th);
  }
  thead.appendChild(headRow);
  const tbody = h("tbody");
  table.append(thead, tbody);
  const pagerBox = h("div");
  const historyBox = h("div", "jtnb-history");
  const scroll = h("div", "jtnb-scroll");
  scroll.appendChild(table);
  root.append(top, controls, scroll, pagerBox, historyBox);
  el.appendChild(root);

  function drawTop() {
    headline.textContent = model.get("headline");
    live.textContent = model.get("live") ? "● live" : "";
    status.textContent = model.get("status");
    toggle.checked = model.get("show_all");
    if (document.activeElement !== filter) filter.value = model.get("filter");
    if (document.activeElement !== variable) variable.value = model.get("variable");
  }

  function drawTable() {
    const sortBy = model.get("sort_by");
    for (const th of headRow.children) {
      const active = th.dataset.column === sortBy;
      th.classList.toggle("jtnb-sorted", active);
      th.dataset.arrow = active ? (model.get("descending") ? "▼" : "▲") : "";
    }
    const scale = model.get("max_compile_s");
    const selected = model.get("selected");
    const rows = [];
    for (const row of model.get("rows")) {
      const tr = h("tr", "jtnb-row");
      if (row.key === selected) tr.classList.add("jtnb-selected");
      if (row.internal || row.nested) tr.classList.add("jtnb-internal");
      tr.dataset.key = row.key;
      tr.title = "show this function's traces";
      for (const [name, , kind] of COLUMNS) tr.appendChild(cell(name, kind, row[name], row, scale));
      tr.addEventListener("click", () => set({ selected: row.key === model.get("selected") ? "" : row.key }));
      rows.push(tr);
    }
    tbody.replaceChildren(...rows);
    if (!rows.length) {
      const tr = h("tr", "jtnb-empty");
      const td = h("td", "", model.get("filter") ? "no function matches the filter" : "no jitted function traced yet");
      td.colSpan = COLUMNS.length;
      tr.appendChild(td);
      tbody.appendChild(tr);
    }
    const size = model.get("page_size");
    const total = model.get("n_rows");
    pagerBox.replaceChildren(...(total > size ? [pager(model.get("page"), size, total, (p) => set({ page: p }))] : []));
  }

  function drawHistory() {
    const events = model.get("history");
    if (!model.get("selected") || !events.length) {
      historyBox.replaceChildren();
      return;
    }
    const title = h("div", "jtnb-history-title");
    title.append(h("b", "", model.get("history_title")));
    const close = h("button", "jtnb-close", "×");
    close.title = "close";
    close.addEventListener("click", () => set({ selected: "" }));
    title.append(" ", close);
    const note = h("div", "jtnb-note", model.get("history_note"));
    const scale = Math.max(0, ...events.map((e) => e.total_s || 0));
    const hist = h("table", "jtnb-table jtnb-history-table");
    const head = h("tr");
    for (const [, label] of HISTORY) head.appendChild(h("th", "", label));
    const thead = h("thead");
    thead.appendChild(head);
    const body = h("tbody");
    for (const event of events) {
      const tr = h("tr", "jtnb-event");
      if (event.slowest) {
        tr.classList.add("jtnb-slowest");
        tr.title = "the slowest trace of this function";
      }
      for (const [name, , kind] of HISTORY) tr.appendChild(cell(name, kind, event[name], event, scale));
      body.appendChild(tr);
    }
    hist.append(thead, body);
    const histScroll = h("div", "jtnb-scroll");
    histScroll.appendChild(hist);
    const size = model.get("page_size");
    const total = model.get("history_total");
    historyBox.replaceChildren(title, note, histScroll);
    if (total > size) historyBox.appendChild(pager(model.get("history_page"), size, total, (p) => set({ history_page: p })));
  }

  drawTop();
  drawTable();
  drawHistory();
  root.dataset.firstPageMs = (performance.now() - started).toFixed(1);

  // One listener per trait: not every frontend's model splits space-separated event names.
  const handlers = [];
  const listen = (names, handler) => {
    for (const name of names) handlers.push([`change:${name}`, handler]);
  };
  listen(["headline", "live", "status", "show_all", "filter", "variable"], drawTop);
  listen(["rows", "sort_by", "descending", "selected", "max_compile_s", "n_rows", "page"], drawTable);
  listen(["history", "history_note", "history_title"], drawHistory);
  for (const [event, handler] of handlers) model.on(event, handler);
  return () => {
    clearTimeout(debounce);
    for (const [event, handler] of handlers) model.off(event, handler);
  };
}

export default { render };
