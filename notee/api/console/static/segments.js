// Notee console: the segment builder. Groups of conditions (a condition: a tag or a built-in
// attribute, an op, a value) edit the form's filter JSON (the textarea, the form's field without
// script), and every change asks the console's estimate endpoint what the filter reaches now (a form
// POST carrying the session's CSRF token, like every console form). Text goes in with textContent.
(function () {
  "use strict";
  var root = document.getElementById("builder");
  var area = document.getElementById("filter");
  var out = document.getElementById("estimate");
  if (!root || !area || !out) { return; }
  var ATTRIBUTES = ["locale", "timezone", "created_at", "platform", "app_version", "country", "last_seen"];
  var OPS = ["=", "!=", "<", "<=", ">", ">=", "in", "not_in", "exists", "not_exists", "elapsed_gt", "elapsed_lt"];
  var TYPES = [["text", "text"], ["number", "number"], ["boolean", "true/false"], ["time", "time (RFC 3339)"]];
  var pending = null, asked = 0;

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function select(className, options, chosen, label) {
    var s = el("select", className);
    s.setAttribute("aria-label", label);
    options.forEach(function (o) {
      var opt = el("option", "", Array.isArray(o) ? o[1] : o);
      opt.value = Array.isArray(o) ? o[0] : o;
      if (opt.value === chosen) { opt.selected = true; }
      s.appendChild(opt);
    });
    return s;
  }

  function typeOf(value) {
    var v = Array.isArray(value) ? value[0] : value;
    if (typeof v === "number") { return "number"; }
    if (typeof v === "boolean") { return "boolean"; }
    if (v && typeof v === "object") { return "time"; }
    return "text";
  }

  function shown(value) {
    if (value === undefined || value === null) { return ""; }
    var list = Array.isArray(value) ? value : [value];
    return list.map(function (v) { return v && typeof v === "object" ? v.timestamp : String(v); }).join(", ");
  }

  function predicateRow(p) {
    var row = el("div", "predicate");
    var subject = select("subject", [["tag", "tag"]].concat(ATTRIBUTES.map(function (a) { return [a, a]; })),
      p.attribute || "tag", "tag or attribute");
    var key = el("input", "key");
    key.placeholder = "tag key";
    key.setAttribute("aria-label", "tag key");
    key.value = p.tag || "";
    var op = select("op", OPS, p.op || "=", "op");
    var type = select("type", TYPES, typeOf(p.value), "value type");
    var value = el("input", "value");
    value.placeholder = "value (a list: a, b)";
    value.setAttribute("aria-label", "value");
    value.value = shown(p.value);
    var remove = el("button", "remove-predicate link", "remove");
    remove.type = "button";
    remove.addEventListener("click", function () {
      var group = row.parentNode;
      row.remove();
      if (!group.querySelector(".predicate")) { group.closest(".group").remove(); }
      changed();
    });
    function layout() {
      var isTag = subject.value === "tag";
      key.hidden = !isTag;
      type.hidden = !isTag || /^(exists|not_exists|elapsed_gt|elapsed_lt)$/.test(op.value);
      value.hidden = /exists$/.test(op.value);
    }
    [subject, op, type].forEach(function (s) { s.addEventListener("change", function () { layout(); changed(); }); });
    [key, value].forEach(function (i) { i.addEventListener("input", changed); });
    layout();
    [subject, key, op, type, value, remove].forEach(function (n) { row.appendChild(n); });
    return row;
  }

  function groupBox(predicates) {
    var box = el("fieldset", "group");
    box.appendChild(el("legend", "", "All of"));
    var list = el("div", "predicates");
    predicates.forEach(function (p) { list.appendChild(predicateRow(p)); });
    box.appendChild(list);
    var add = el("button", "add-predicate link", "+ and");
    add.type = "button";
    add.addEventListener("click", function () { list.appendChild(predicateRow({ op: "=" })); changed(); });
    var drop = el("button", "remove-group link", "remove group");
    drop.type = "button";
    drop.addEventListener("click", function () { box.remove(); changed(); });
    box.appendChild(add);
    box.appendChild(document.createTextNode(" "));
    box.appendChild(drop);
    return box;
  }

  function typed(text, type, attribute, op) {
    if (/^elapsed_/.test(op)) { return Number(text); }
    if (attribute) { return text; }
    if (type === "number") { return text.trim() === "" ? text : Number(text); }
    if (type === "boolean") { return text.trim().toLowerCase() === "true"; }
    if (type === "time") { return { timestamp: text.trim() }; }
    return text;
  }

  function filter() {
    var groups = [];
    root.querySelectorAll(".group").forEach(function (g) {
      var group = [];
      g.querySelectorAll(".predicate").forEach(function (row) {
        var subject = row.querySelector(".subject").value, op = row.querySelector(".op").value;
        var type = row.querySelector(".type").value, text = row.querySelector(".value").value;
        var attribute = subject === "tag" ? null : subject;
        var p = attribute ? { attribute: attribute } : { tag: row.querySelector(".key").value.trim() };
        p.op = op;
        if (!/exists$/.test(op)) {
          p.value = /in$/.test(op)
            ? text.split(",").map(function (t) { return typed(t.trim(), type, attribute, op); })
            : typed(text, type, attribute, op);
        }
        group.push(p);
      });
      if (group.length) { groups.push(group); }
    });
    return groups;
  }

  function show(data) {
    var platforms = Object.keys(data.devices_by_platform || {}).sort().map(function (p) {
      return p + " " + data.devices_by_platform[p];
    }).join(", ");
    out.textContent = "Reach now: " + data.users + " users · " + data.devices + " devices" +
      (platforms ? " (" + platforms + ")" : "");
    out.className = "notice wide";
    out.setAttribute("data-users", String(data.users));
    out.setAttribute("data-devices", String(data.devices));
    out.removeAttribute("data-error");
  }

  function estimate() {
    var mine = ++asked;
    var body = new URLSearchParams({ csrf: root.getAttribute("data-csrf"), filter: area.value });
    fetch(root.getAttribute("data-estimate"), {
      method: "POST", credentials: "same-origin", body: body,
      headers: { Accept: "application/json", "Content-Type": "application/x-www-form-urlencoded" }
    }).then(function (r) {
      if (r.status === 401) { window.location.reload(); throw new Error("signed out"); }
      return r.json().then(function (data) { return { ok: r.ok, data: data }; });
    }).then(function (answer) {
      if (mine !== asked) { return; }  // a later change asked again: its answer is the one to show
      if (answer.ok) { show(answer.data); return; }
      out.textContent = "Not counted: " + answer.data.error.message;
      out.className = "error wide";
      out.setAttribute("data-error", answer.data.error.message);
    }).catch(function () { if (mine === asked) { out.textContent = "Not counted: the console did not answer."; } });
  }

  function changed() {
    area.value = JSON.stringify(filter());
    window.clearTimeout(pending);
    pending = window.setTimeout(estimate, 300);
  }

  var initial = [];
  try { initial = JSON.parse(area.value); } catch (e) { initial = []; }
  if (!Array.isArray(initial) || !initial.length) { initial = [[{ tag: "", op: "=", value: "" }]]; }
  initial.forEach(function (group) { root.appendChild(groupBox(Array.isArray(group) ? group : [])); });
  var addGroup = el("button", "add-group", "+ or (a group)");
  addGroup.type = "button";
  addGroup.addEventListener("click", function () {
    root.insertBefore(groupBox([{ tag: "", op: "=", value: "" }]), addGroup);
    changed();
  });
  root.appendChild(addGroup);
  document.getElementById("filter-label").hidden = true;  // the builder edits it now
  changed();
})();
