// Notee console composer (publish page): shows the fields of the chosen target and time, and 400 ms
// after each change POSTs the form to publish/preview.json (the session's CSRF token is in the form)
// to show the target's reach and, per locale, what an Android, an iOS (and a Web) device would show
// (its rich fields, or that a silent push shows nothing) with the size against each provider's limit. Text goes in with textContent only. With script off, the form still works: the
// confirmation page shows the same reach and preview.
(function () {
  "use strict";
  var form = document.getElementById("publish");
  if (!form) { return; }
  var pick = document.getElementById("pick-template");
  var timer = null;
  var asked = 0;

  if (pick) {
    // A pick with the mouse loads the template at once; with the keyboard the arrow keys change the
    // choice as they go, so it waits for "Use this template" (loading on each key would leave the
    // page under the user's fingers: WCAG 3.2.2, on input).
    var byKeys = false;
    pick.addEventListener("keydown", function () { byKeys = true; });
    pick.addEventListener("pointerdown", function () { byKeys = false; });
    pick.addEventListener("change", function () {
      if (!byKeys) { document.getElementById("pick").submit(); }
    });
  }

  function el(tag, text, className) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) { node.textContent = String(text); }
    if (className) { node.className = className; }
    return node;
  }

  function showFields() {
    var kind = form.elements.target.value;
    form.querySelectorAll("[data-target]").forEach(function (label) {
      label.hidden = label.getAttribute("data-target") !== kind;
    });
    var checked = form.querySelector('input[name="when"]:checked');
    var moment = checked ? checked.value : "now";
    form.querySelectorAll("[data-when]").forEach(function (label) {
      label.hidden = label.getAttribute("data-when") !== moment;
    });
  }

  function reachText(r) {
    if (!r) { return "Not counted."; }
    var parts = [];
    if (r.users !== null && r.users !== undefined) { parts.push(r.users + " users"); }
    if (r.devices !== null && r.devices !== undefined) { parts.push(r.devices + " devices"); }
    if (r.devices_by_platform) {
      parts.push("(" + Object.keys(r.devices_by_platform).map(function (os) {
        return os + " " + r.devices_by_platform[os];
      }).join(", ") + ")");
    }
    if (r.unknown_users) { parts.push(r.unknown_users + " unknown ids skipped"); }
    return "Reaches " + parts.join(" · ") + (r.exact ? "" : " (from the topic counters: at most)");
  }

  // What each kind of push does on the device (devices.py: a card's "show").
  var SHOW = {
    background: "Silent: nothing shown, wakes the app",
    badge: "No banner: only sets the badge",
    data: "Nothing shown: a data message for the app"
  };

  // One platform's card: what its device would show, from the body its provider would get.
  function deviceCard(locale, d) {
    var card = el("section", null, "device device-" + d.platform);
    card.setAttribute("data-platform", d.platform);
    card.setAttribute("data-locale", locale);
    card.setAttribute("data-show", d.show);
    card.setAttribute("aria-label", d.label + ", " + locale);
    var head = el("h4", d.label);
    head.appendChild(el("span", " via " + d.provider, "muted"));
    card.appendChild(head);
    if (d.show !== "alert") {
      var note = el("p", SHOW[d.show] || d.show, "silent");
      note.setAttribute("data-silent", d.show);
      card.appendChild(note);
    } else {
      var banner = el("div", null, "banner");
      var title = el("p", null, "title");
      title.appendChild(el("strong", d.title));
      banner.appendChild(title);
      if (d.subtitle) {  // iOS shows it between the title and the body; Android has none
        var subtitle = el("p", d.subtitle, "subtitle");
        subtitle.setAttribute("data-subtitle", d.subtitle);
        banner.appendChild(subtitle);
      }
      banner.appendChild(el("p", d.body, "pre body"));
      if (d.image) {  // named, never loaded: the console fetches nothing from elsewhere
        var image = el("p", "Image: " + d.image, "image");
        image.setAttribute("data-image", d.image);
        banner.appendChild(image);
      }
      card.appendChild(banner);
    }
    if (d.facts && d.facts.length) {
      var facts = el("dl", null, "device-facts");
      d.facts.forEach(function (f) {
        facts.appendChild(el("dt", f[1]));
        var value = el("dd", f[2]);
        value.setAttribute("data-fact", f[0]);
        facts.appendChild(value);
      });
      card.appendChild(facts);
    }
    var size = el("p", d.bytes + " of " + d.limit + " bytes", "size");
    size.setAttribute("data-size", d.platform);
    if (d.over) { size.appendChild(el("span", " over the limit", "over")); }
    card.appendChild(size);
    return card;
  }

  function showPreview(data) {
    var reach = document.getElementById("reach");
    reach.textContent = reachText(data.reach);
    reach.className = data.zero ? "warn" : "";
    var warnings = document.getElementById("warnings");
    warnings.replaceChildren.apply(warnings, (data.warnings || []).map(function (w) { return el("li", w, "warn"); }));
    var box = document.getElementById("preview");
    box.replaceChildren.apply(box, (data.variants || []).map(function (v) {
      var locale = el("section", null, "locale");
      locale.setAttribute("data-locale", v.locale);
      locale.appendChild(el("h3", "Locale " + v.locale));
      var cards = el("div", null, "device-row");
      (v.devices || []).forEach(function (d) { cards.appendChild(deviceCard(v.locale, d)); });
      locale.appendChild(cards);
      return locale;
    }));
  }

  // The fields the API's 422 names (details[].loc, mapped by the server) are marked invalid.
  function markInvalid(names) {
    form.querySelectorAll("[aria-invalid]").forEach(function (c) { c.removeAttribute("aria-invalid"); });
    (names || []).forEach(function (name) {
      var control = form.elements.namedItem(name);
      if (control && control.setAttribute) { control.setAttribute("aria-invalid", "true"); }
    });
  }

  function refresh() {
    var mine = ++asked;
    var body = new URLSearchParams(new FormData(form));
    fetch(form.getAttribute("data-preview"), {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/x-www-form-urlencoded", Accept: "application/json" },
      body: body.toString()
    }).then(function (r) {
      if (r.status === 401) { window.location.reload(); throw new Error("signed out"); }
      return r.json().then(function (data) { return [r.ok, data]; });
    }).then(function (answer) {
      if (mine !== asked) { return; }  // a later change is on its way
      var problem = document.getElementById("preview-error");
      var ok = answer[0], data = answer[1];
      markInvalid(ok ? [] : data.invalid);
      if (ok) {
        problem.hidden = true;
        showPreview(data);
      } else {
        problem.hidden = false;
        problem.textContent = "Not previewed: " + (data.error ? data.error.message : "error");
        document.getElementById("reach").textContent = reachText(data.reach);
        document.getElementById("preview").replaceChildren();
      }
      form.setAttribute("data-previewed", String(Date.now()));
    }).catch(function () { /* the next change asks again */ });
  }

  function changed() {
    showFields();
    window.clearTimeout(timer);
    timer = window.setTimeout(refresh, 400);
  }

  form.addEventListener("input", changed);
  form.addEventListener("change", changed);
  // A double click sends one request; the Idempotency-Key makes a resubmission the same job anyway.
  form.addEventListener("submit", function () { document.getElementById("review").disabled = true; });
  showFields();
  refresh();
})();
