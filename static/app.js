// The dashboard's only script besides htmx: no inline handlers, so the CSP stays strict.

// Shared by the parts below. say: a sentence into the page's one status region (#announcer,
// base.html; the banner is no live region). bannerLine: a line of the status banner, marked by
// an attribute, its title in bold and its words after it (the banner's own lines look so).
var dlqPage = {
  say: function (sentence) {
    var announcer = document.getElementById("announcer");
    if (announcer) {
      announcer.textContent = sentence;
    }
  },
  bannerLine: function (marker, title) {
    var line = document.createElement("p");
    line.className = "stale";
    line.setAttribute(marker, "");
    var bold = document.createElement("strong");
    bold.textContent = title;
    line.append(bold);
    line.append.apply(line, Array.prototype.slice.call(arguments, 2));
    return line;
  }
};
(function () {
  "use strict";

  // Every htmx request carries the CSRF token from the page's meta tag.
  document.addEventListener("htmx:configRequest", function (event) {
    var meta = document.querySelector('meta[name="csrf-token"]');
    if (meta) {
      event.detail.headers["X-CSRFToken"] = meta.getAttribute("content");
    }
  });

  // A "select all" checkbox ticks every checkbox of the same name on the page.
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box || !box.matches || !box.matches("input[type=checkbox][data-select-all]")) {
      return;
    }
    var name = box.getAttribute("data-select-all");
    var wanted = box.checked;  // read once: each tick below counts again, and sets the box as it goes
    document.querySelectorAll('input[type=checkbox][name="' + CSS.escape(name) + '"]').forEach(function (other) {
      if (other.checked !== wanted) {
        other.checked = wanted;
        other.dispatchEvent(new Event("change", { bubbles: true }));
      }
    });
  });

  // The bulk bar says how many entries are ticked: "Selected entries (2)", in its label's text
  // (so the choice of action is named with it); counted again at each tick and each swap of rows.
  function countTicked() {
    document.querySelectorAll(".ticked-count").forEach(function (count) {
      var results = count.closest(".results") || document;
      var ticked = results.querySelectorAll("input[type=checkbox][name=ids]:checked").length;
      count.textContent = ticked ? " (" + ticked + ")" : "";
    });
    // "Select all" says what is ticked: all, none, or some (mixed), as rows come and go.
    document.querySelectorAll("input[type=checkbox][data-select-all]").forEach(function (box) {
      var all = document.querySelectorAll('input[type=checkbox][name="' + CSS.escape(box.getAttribute("data-select-all")) + '"]');
      var ticked = Array.prototype.filter.call(all, function (one) { return one.checked; }).length;
      box.checked = all.length > 0 && ticked === all.length;
      box.indeterminate = ticked > 0 && ticked < all.length;
    });
  }
  document.addEventListener("change", function (event) {
    if (event.target && event.target.matches && event.target.matches("input[type=checkbox][name=ids]")) {
      countTicked();
    }
  });
  document.addEventListener("htmx:afterSettle", countTicked);
  document.addEventListener("DOMContentLoaded", countTicked);
  window.addEventListener("pageshow", countTicked);  // back to a page whose boxes the browser kept ticked
})();

// --- The stale-data banner and the actions that need NATS -----------------------------------
// The banner (base.html, web/status.py) is polled every 2 s. Its marker says whether NATS is
// reachable; every element marked data-needs-nats is disabled with the reason as its title while
// it is not, and enabled again when it is back. The reason is set as text, never as markup.
(function () {
  "use strict";

  function applyNatsState(root) {
    var marker = root.querySelector("[data-nats-state]");
    if (!marker) {
      return;
    }
    var down = marker.getAttribute("data-nats-state") === "down";
    var reason = marker.getAttribute("data-nats-reason") || "";
    document.querySelectorAll("[data-needs-nats]").forEach(function (element) {
      element.disabled = down;
      if (down) {
        element.setAttribute("title", reason);
      } else {
        element.removeAttribute("title");
      }
      // A disabled <option> that is chosen would submit nothing: choose the first one left.
      var select = element.tagName === "OPTION" ? element.parentElement : null;
      if (down && select && select.value === element.value) {
        var usable = Array.prototype.find.call(select.options, function (option) { return !option.disabled; });
        if (usable) {
          select.value = usable.value;
        }
      }
    });
    document.querySelectorAll("[data-needs-nats-note]").forEach(function (note) {
      note.hidden = !down;
      var text = note.querySelector("[data-needs-nats-reason]");
      if (text) {
        text.textContent = reason;
      }
    });
  }

  document.addEventListener("htmx:afterSettle", function (event) {
    var target = event.detail && event.detail.target;
    if (target && target.matches && target.matches("[data-status-banner]")) {
      applyNatsState(target);
    }
  });

  // The banner is a strip at the window's bottom, out of the page's flow (app.css): its height,
  // as --status-height, is kept free at the page's end and under the bars that stay at the
  // window's bottom (the bulk bar, the editor's actions), so it never covers them. Both heights
  // together, as --bottom-covered, are kept clear of what Tab or a link scrolls to (the page's
  // scroll padding), so that the focus is never under them.
  var BARS = ".bulk-actions, .editor-actions";
  var root = document.documentElement;

  function measure() {
    var banner = document.querySelector("[data-status-banner]");
    var strip = banner ? banner.offsetHeight : 0;
    var bar = 0;
    document.querySelectorAll(BARS).forEach(function (element) {
      bar = Math.max(bar, element.offsetHeight);
    });
    root.style.setProperty("--status-height", strip + "px");
    root.style.setProperty("--bottom-covered", strip + bar + "px");
  }

  var sizes = new ResizeObserver(measure);

  function follow() {
    sizes.disconnect();
    document.querySelectorAll("[data-status-banner], " + BARS).forEach(function (element) {
      sizes.observe(element);
    });
    measure();
  }

  document.addEventListener("DOMContentLoaded", follow);
  document.addEventListener("htmx:afterSwap", function (event) {
    var target = event.detail && event.detail.target;
    if (!(target && target.closest && target.closest("[data-status-banner]"))) {
      follow();  // the bars may have been rendered again
    }
  });
})();

// --- A session that ended ----------------------------------------------------------------------
// An htmx request answered 401 (the session ended: logout in another tab, a new password, an
// idle session expired) is never swapped in and never navigates: the banner says so, and the
// page keeps what was typed. The banner's poll goes on; once the person has signed in again in
// another tab it answers again, its content replaces the notice, and its marker brings the new
// session's CSRF token, which this page's forms and htmx requests then send.
(function () {
  "use strict";

  function showSignedOut() {
    var banner = document.querySelector("[data-status-banner]");
    if (!banner || banner.querySelector("[data-signed-out]")) {
      return;
    }
    var link = document.createElement("a");
    link.href = banner.getAttribute("data-login-url") || "/login";
    link.target = "_blank";
    link.rel = "noopener";
    link.textContent = "sign in again in another tab";
    var notice = dlqPage.bannerLine("data-signed-out", "You were signed out", ": ", link,
                                    "; this page keeps what you typed.");
    banner.prepend(notice);
    dlqPage.say(notice.textContent);
  }

  function takeCsrfToken(root) {
    var marker = root.querySelector("[data-csrf-token]");
    var token = marker && marker.getAttribute("data-csrf-token");
    if (!token) {
      return;
    }
    var meta = document.querySelector('meta[name="csrf-token"]');
    if (meta) {
      meta.setAttribute("content", token);
    }
    document.querySelectorAll('input[type=hidden][name="csrf_token"]').forEach(function (input) {
      input.value = token;
    });
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    if (event.detail.xhr && event.detail.xhr.status === 401) {
      event.detail.shouldSwap = false;
      showSignedOut();
    }
  });

  document.addEventListener("htmx:afterSettle", function (event) {
    var target = event.detail && event.detail.target;
    if (target && target.matches && target.matches("[data-status-banner]")) {
      takeCsrfToken(target);
      if (!target.querySelector("[data-signed-out]")) {
        document.querySelectorAll("[data-held-signed-out]").forEach(function (line) { line.remove(); });
      }
    }
  });

  // While the banner says the session ended, a form is not sent: it would only be refused, and
  // leaving the page would take what was typed with it. The form says why, and what to do; once
  // the person has signed in again (the banner's poll answers), the sentence goes and the form
  // is sent as usual. Registered before the other submit handlers, which see it prevented. (A
  // form htmx sends is answered 401 and kept as it is: the banner says so.)
  document.addEventListener("submit", function (event) {
    var form = event.target;
    var banner = document.querySelector("[data-status-banner]");
    if (event.defaultPrevented || !form || !form.matches || !form.matches("form[method=post i]") ||
        form.matches("[hx-post], [action$='/logout']") || !banner || !banner.querySelector("[data-signed-out]")) {
      return;
    }
    event.preventDefault();
    var sentence = "Not sent: you were signed out. Sign in again in another tab, then send it again; " +
      "what you typed stays here.";
    var line = form.querySelector("[data-held-signed-out]");
    if (!line) {
      line = document.createElement("p");
      line.className = "error";
      line.setAttribute("data-held-signed-out", "");
      form.append(line);
    }
    line.textContent = sentence;
    dlqPage.say(sentence);
  });
})();

// --- A dashboard that does not answer -------------------------------------------------------------
// While the browser cannot reach the dashboard (offline, the dashboard away, a proxy answering 502,
// 503 or 504 for it), nothing the page shows is brought up to date: from the banner's second poll
// in a row without an answer, the banner says so and since when, and the page's status region
// says it once; it goes, and that is said, when a poll is answered again. A poll that hangs is
// given up after 10 s, as one with no answer.
(function () {
  "use strict";

  var UNREACHED = [502, 503, 504];
  var failures = 0, since = null, shown = false;

  function banner(event) {
    var elt = event.detail && event.detail.elt;
    return elt && elt.matches && elt.matches("[data-status-banner]") ? elt : null;
  }

  function unanswered(event) {
    var polled = banner(event);
    if (!polled) {
      return;
    }
    failures += 1;
    since = since || new Date();
    if (failures < 2 || polled.querySelector("[data-unreachable]")) {
      return;
    }
    polled.prepend(dlqPage.bannerLine("data-unreachable", "The dashboard cannot be reached",
      " since " + since.toISOString().slice(11, 19) + " UTC: this browser gets no answer from it. " +
      "What this page shows may be out of date; it catches up when the dashboard answers again."));
    if (!shown) {
      dlqPage.say("The dashboard cannot be reached: what this page shows may be out of date.");
    }
    shown = true;
  }

  document.addEventListener("htmx:configRequest", function (event) {
    if (banner(event) && !event.detail.timeout) {
      event.detail.timeout = 10000;
    }
  });
  document.addEventListener("htmx:sendError", unanswered);
  document.addEventListener("htmx:timeout", unanswered);
  document.addEventListener("htmx:responseError", function (event) {
    var xhr = event.detail.xhr;
    if (xhr && UNREACHED.indexOf(xhr.status) >= 0) {
      unanswered(event);
    }
  });
  document.addEventListener("htmx:afterRequest", function (event) {
    var polled = banner(event), xhr = event.detail.xhr;
    if (!polled || !xhr || !xhr.status || UNREACHED.indexOf(xhr.status) >= 0) {
      return;
    }
    failures = 0;
    since = null;
    var line = polled.querySelector("[data-unreachable]");  // still there when the answer was not swapped in (401)
    if (line) {
      line.remove();
    }
    if (shown) {
      shown = false;
      dlqPage.say("The dashboard answers again.");
    }
  });
})();

// --- Keyboard -----------------------------------------------------------------------------------
// j / k choose the next / previous row of a list (rows marked data-row-url), or on an entry's
// page open its next / previous entry (links marked data-neighbour); Enter opens the chosen row,
// "/" jumps to the search box, "?" shows the keys (the dialog in base.html; Escape closes it). Nothing happens while typing in a field or with Ctrl, Alt or Meta held.
// No key leaves the page while a field holds text typed and not sent (a Close note, then Tab to
// its button, then j lost the note). The keys can be turned off (WCAG 2.1.4) in their dialog,
// which the header's "Keys" button opens too; remembered in localStorage.
(function () {
  "use strict";

  var OFF = "dlq.keys.off";

  function keysOff() {
    try {
      return window.localStorage.getItem(OFF) === "1";
    } catch (error) {
      return false;  // storage refused (a private window): the keys stay on
    }
  }

  // A text field whose value is not what the page came with, outside the forms htmx sends as
  // they are typed in (the filters): text a person typed and has not sent.
  var TEXT = /^(text|search|email|url|tel|number|password)$/;
  function unsent() {
    return Array.prototype.some.call(document.querySelectorAll("textarea, input"), function (field) {
      return (field.tagName === "TEXTAREA" || TEXT.test(field.type)) && !field.disabled &&
        !field.closest("form[hx-get]") && field.value !== field.defaultValue;
    });
  }

  function leave(url) {
    if (!unsent()) {
      window.location.assign(url);
    } else {
      dlqPage.say("Not opened: a field holds text you typed and have not sent.");
    }
    return true;  // the key is taken either way: it never types or scrolls instead
  }

  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("keys-off");
    if (box) {
      box.checked = keysOff();
    }
  });
  document.addEventListener("change", function (event) {
    if (event.target && event.target.id === "keys-off") {
      try {
        window.localStorage.setItem(OFF, event.target.checked ? "1" : "0");
      } catch (error) {
        // not remembered: this page keeps the choice until it is left
      }
    }
  });
  document.addEventListener("click", function (event) {
    var opener = event.target && event.target.closest && event.target.closest("[data-open-keys]");
    var help = document.getElementById("keys-help");
    if (opener && help && !help.open) {
      help.showModal();
    }
  });

  function typing(target) {
    return target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
  }

  function choose(row) {
    document.querySelectorAll("tr.row-current").forEach(function (other) {
      other.classList.remove("row-current");
      other.removeAttribute("aria-current");
    });
    row.classList.add("row-current");
    row.setAttribute("aria-current", "true");
    row.tabIndex = -1;
    row.focus({ preventScroll: true });
    row.scrollIntoView({ block: "nearest" });
  }

  function move(step) {
    var rows = Array.prototype.slice.call(document.querySelectorAll("tr[data-row-url]"));
    if (!rows.length) {
      return false;
    }
    var at = rows.indexOf(document.querySelector("tr.row-current"));
    choose(rows[at < 0 ? 0 : Math.min(Math.max(at + step, 0), rows.length - 1)]);
    return true;
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented || typing(event.target)) {
      return;
    }
    var box = document.getElementById("keys-off");
    if (box ? box.checked : keysOff()) {
      return;
    }
    var help = document.getElementById("keys-help");
    if (help && help.open) {
      return;
    }
    var handled = false;
    if (event.key === "/") {
      var search = document.getElementById("q");
      if (search) {
        search.focus();
        search.select();
        handled = true;
      }
    } else if (event.key === "?") {
      if (help) {
        help.showModal();
        handled = true;
      }
    } else if (event.key === "j" || event.key === "k") {
      // On an entry's page (no rows): its next (older) or previous (newer) entry in its list.
      var neighbour = document.querySelector('a[data-neighbour="' + (event.key === "j" ? "next" : "prev") + '"]');
      if (!document.querySelector("tr[data-row-url]") && neighbour) {
        handled = leave(neighbour.getAttribute("href"));
      } else {
        handled = move(event.key === "j" ? 1 : -1);
      }
    } else if (event.key === "Enter") {
      // Only for the chosen row itself: Enter on a link or button keeps its own meaning.
      var row = document.querySelector("tr.row-current[data-row-url]");
      if (row && (event.target === row || event.target === document.body)) {
        handled = leave(row.getAttribute("data-row-url"));
      }
    }
    if (handled) {
      event.preventDefault();
    }
  });
})();

// --- Actions on a list row ------------------------------------------------------------------
// A row's Republish and Close (templates/_row_actions.html) are forms leading to a confirmation
// page. With script the same question is asked here, naming the entry, and the action is posted
// through htmx, which swaps the row with the answer (the row as it is now, and what was done).
// The row is hx-disable (its text comes from payloads), so this takes no hx- attributes.
(function () {
  "use strict";

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form || !form.matches || !form.matches("form[data-row-action]") || !window.htmx) {
      return;
    }
    event.preventDefault();
    if (!window.confirm(form.getAttribute("data-confirm"))) {
      return;
    }
    var row = form.closest("tr");
    var values = {};
    new FormData(form).forEach(function (value, name) { values[name] = value; });
    if (row.contains(document.activeElement)) {
      row.setAttribute("data-focus-back", "");  // the focus, lost as its button is disabled, returns to the row
    }
    var buttons = form.querySelectorAll("button");
    buttons.forEach(function (button) { button.disabled = true; });
    var answer = null;
    form.addEventListener("htmx:afterRequest", function (done) { answer = done.detail.xhr; }, { once: true });
    // The answer swapped in says what was done (the row as it is now). A request that got no
    // answer, or one not swapped in (signed out, the dashboard refusing), changed nothing on the
    // page: the buttons work again and the row says why (the promise is settled either way, so a
    // request that failed is no uncaught error).
    function notSwapped() {
      if (!form.isConnected) {
        return;
      }
      var why;
      if (!answer || !answer.status) {
        why = "Not sent: the dashboard did not answer. Try again when it does.";
      } else if (answer.status === 401) {
        why = "Not sent: you were signed out. Sign in again in another tab, then try again.";
      } else {
        var plain = /^text\/plain/.test(answer.getResponseHeader("Content-Type") || "");
        why = "Not done: " + ((plain && answer.responseText.trim()) || "the dashboard answered " + answer.status + ".");
      }
      var marker = document.querySelector("[data-nats-state]");
      var natsDown = marker && marker.getAttribute("data-nats-state") === "down";
      buttons.forEach(function (button) {
        button.disabled = natsDown && button.hasAttribute("data-needs-nats");
      });
      var cell = form.closest("td") || form.parentElement;
      var line = cell.querySelector(".row-message");
      if (!line) {
        line = document.createElement("p");
        cell.append(line);
      }
      line.className = "row-message error";
      line.id = "row-message-" + (row.getAttribute("data-id") || "");
      line.textContent = why;
      dlqPage.say(why);
      if (row.hasAttribute("data-focus-back")) {
        row.removeAttribute("data-focus-back");
        var usable = Array.prototype.find.call(buttons, function (button) { return !button.disabled; });
        if (usable && (!document.activeElement || document.activeElement === document.body)) {
          usable.focus();
        }
      }
    }
    window.htmx.ajax("POST", form.getAttribute("data-post"),
                     { source: form, target: row, swap: "outerHTML", values: values }).then(notSwapped, notSwapped);
  });
})();

// --- The older rows across Back ----------------------------------------------------------------
// "Show older entries" appends rows to the list in place. Back to the list from an entry opened
// among them loaded the list anew with its first rows alone, and the browser put the scroll where
// it was, at the bottom of far fewer rows: the entry was no longer there. How many times older
// rows were shown is kept in the list's history entry (and where the page was scrolled, as it is
// left); back on it, as many are shown again and the scroll is put back once they are there (the
// browser's own restoring is turned off for that entry, as it would come before them).
(function () {
  "use strict";

  var restoring = false;

  function kept() {
    return Object.assign({}, window.history.state || {});
  }

  document.addEventListener("htmx:afterRequest", function (event) {
    // The link that asked (requestConfig's): the event comes to its row's parent, as the link is
    // out of the page by now (its row was replaced by the older rows).
    var config = event.detail && event.detail.requestConfig, elt = config && config.elt;
    if (restoring || !event.detail.successful || !elt || !elt.closest || !elt.closest("tr.more")) {
      return;
    }
    var state = kept();
    state.olderRows = (state.olderRows || 0) + 1;
    window.history.replaceState(state, "");
    window.history.scrollRestoration = "manual";
  });

  window.addEventListener("pagehide", function () {
    var state = kept();
    if (state.olderRows) {
      state.scrollY = window.scrollY;
      window.history.replaceState(state, "");
    }
  });

  function showOlder(left, scrollY) {
    var link = document.querySelector("#entry-rows tr.more a[hx-get]");
    if (!left || !link) {
      restoring = false;
      window.scrollTo(0, scrollY || 0);
      return;
    }
    window.htmx.ajax("GET", link.getAttribute("hx-get"),
                     { source: link, target: link.closest("tr"), swap: "outerHTML", select: "#entry-rows > tr" })
      .then(function () { showOlder(left - 1, scrollY); }, function () { restoring = false; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var state = window.history.state;
    if (!state || !state.olderRows || !window.htmx || !document.querySelector("#entry-rows tr.more")) {
      return;
    }
    window.history.scrollRestoration = "manual";
    restoring = true;
    showOlder(state.olderRows, state.scrollY);
  });
})();

// --- A form is sent once -------------------------------------------------------------------
// A plain form's second submission while the first is on its way (a double click, a slow
// network) reached the server twice: two bulk jobs from one Start, or a "changed meanwhile" page
// for one's own close. Once a POST form is sent, a further submit is ignored and its buttons are
// disabled (after the submission has taken the pressed button's name and value); back on the
// page (the browser's cache keeps it as it was), they work again. Forms htmx posts, and a row's
// actions (above), keep their own rules.
(function () {
  "use strict";

  var SUBMITS = "button:not([type]), button[type=submit], input[type=submit]";

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (event.defaultPrevented || !form || !form.matches || !form.matches("form[method=post i]") ||
        form.hasAttribute("hx-post") || form.hasAttribute("data-row-action")) {
      return;
    }
    if (form.hasAttribute("data-sent")) {
      event.preventDefault();
      return;
    }
    form.setAttribute("data-sent", "");
    window.setTimeout(function () {
      form.querySelectorAll(SUBMITS).forEach(function (button) {
        if (!button.disabled) {
          button.disabled = true;
          button.setAttribute("data-sent-disabled", "");
        }
      });
    }, 0);
  });

  window.addEventListener("pageshow", function () {
    document.querySelectorAll("form[data-sent]").forEach(function (form) {
      form.removeAttribute("data-sent");
      form.querySelectorAll("[data-sent-disabled]").forEach(function (button) {
        button.disabled = false;
        button.removeAttribute("data-sent-disabled");
      });
    });
  });
})();

// --- The list's columns at the window's width ------------------------------------------------
// app.css leaves the secondary columns to the entry's page at fixed widths, which fit the list
// with two key fields. With more columns (more key fields, the source of several), this leaves
// more while the table is still wider than its place, in this order: the original msgId and the
// deliveries, the consumer and the payload, the key fields from the last to the second, the
// source. Done before the browser paints (at load, after a swap), and again when the place's width
// changes; nothing is left out on a window where everything fits, nor in the narrow layout
// (a block a row, never wider than its place).
(function () {
  "use strict";

  function plan(table) {
    var steps = [".msg-id, .num", ".consumer, .snippet"];
    var fields = table.querySelectorAll("thead th.key-field");
    for (var i = fields.length - 1; i >= 1; i--) {
      steps.push('.key-field[data-label="' + CSS.escape(fields[i].getAttribute("data-label")) + '"]');
    }
    steps.push(".source");
    return steps;
  }

  function fit(table) {
    table.querySelectorAll("[data-fitted-out]").forEach(function (cell) {
      cell.style.removeProperty("display");
      cell.removeAttribute("data-fitted-out");
    });
    var place = table.parentElement, style = getComputedStyle(place);
    var room = place.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    var steps = plan(table);
    for (var i = 0; i < steps.length && table.offsetWidth > room; i++) {
      table.querySelectorAll(steps[i]).forEach(function (cell) {
        if (cell.matches("th, td")) {
          cell.style.setProperty("display", "none");
          cell.setAttribute("data-fitted-out", "");
        }
      });
    }
  }

  var widths = new WeakMap();
  var watching = new ResizeObserver(function (changes) {
    changes.forEach(function (change) {
      var width = change.contentRect.width;
      if (widths.get(change.target) !== width) {
        widths.set(change.target, width);
        change.target.querySelectorAll(":scope > table.entries").forEach(fit);
      }
    });
  });

  function fitAll() {
    document.querySelectorAll("table.entries").forEach(function (table) {
      fit(table);
      widths.set(table.parentElement, table.parentElement.getBoundingClientRect().width);
      watching.observe(table.parentElement);
    });
  }

  document.addEventListener("DOMContentLoaded", fitAll);
  document.addEventListener("htmx:afterSwap", function (event) {
    var target = event.detail && event.detail.target;
    if (!(target && target.closest && target.closest("[data-status-banner]"))) {
      fitAll();
    }
  });
})();

// --- Folded parts that remember --------------------------------------------------------------
// A <details data-remember="key"> is opened or folded as it was last left (localStorage), also
// after htmx renders it again: the list's chart, its further filters. data-keep-open: the server
// opened it (one of its fields has a value), and it stays open. data-fold-narrow: folded at first
// on a narrow window, until it is opened once.
(function () {
  "use strict";

  var PREFIX = "dlq.fold.";
  var narrow = window.matchMedia("(max-width: 600px)");

  function stored(key) {
    try {
      return window.localStorage.getItem(PREFIX + key);
    } catch (error) {
      return null; // storage refused (a private window): every part keeps its default
    }
  }

  function apply(root) {
    root.querySelectorAll("details[data-remember]").forEach(function (details) {
      var was = stored(details.getAttribute("data-remember"));
      if (was === "open") {
        details.open = true;
      } else if ((was === "folded" || (was === null && details.hasAttribute("data-fold-narrow") && narrow.matches)) &&
                 !details.hasAttribute("data-keep-open")) {
        details.open = false;
      }
      details.setAttribute("data-remembered", "");
    });
  }

  // Only a person's toggle is remembered (a click on the summary, also Enter or Space on it), not
  // what apply() sets. Remembered in the click's own task, before the summary toggles its part (so
  // as the opposite of its state now): the "toggle" event comes in a later task, and a page left
  // at once (a link followed, a reload) lost what was chosen (seen in CI).
  document.addEventListener("click", function (event) {
    var summary = event.target && event.target.closest && event.target.closest("details[data-remember] > summary");
    if (!summary || event.defaultPrevented) {
      return;
    }
    var details = summary.parentElement;
    try {
      window.localStorage.setItem(PREFIX + details.getAttribute("data-remember"), details.open ? "folded" : "open");
    } catch (error) {
      // not remembered: nothing else depends on it
    }
  });

  document.addEventListener("DOMContentLoaded", function () { apply(document); });
  // In the swap's own task, before the browser paints: a part folded as it was left never shows
  // open for a frame (the rows below would jump down and back). elt: the new content (an
  // outerHTML swap's target is the old element, out of the page by then).
  document.addEventListener("htmx:afterSwap", function (event) {
    var swapped = event.detail && (event.detail.elt || event.detail.target);
    apply((swapped && swapped.isConnected && swapped.parentElement) || document);
  });
})();

// --- What was just done --------------------------------------------------------------------------
// The sentence an action leaves for the page it leads to (base.html) is shown as the page comes;
// its words go into the page's status region (#announcer) after the page has loaded: a screen
// reader announces a region's change, not its first content.
document.addEventListener("DOMContentLoaded", function () {
  "use strict";
  var announce = document.getElementById("announcer");
  document.querySelectorAll("[data-done]").forEach(function (region) {
    if (!announce) { return; }
    window.setTimeout(function () {
      announce.textContent = Array.prototype.map.call(region.querySelectorAll("p"),
        function (p) { return p.textContent.trim(); }).join(" ");
    }, 100);
  });
});

// --- The editor's gutter -----------------------------------------------------------------------
// Beside the payload editor (edit.html): one number a line, those the schema check points at
// marked (the check's data-failing-lines, new after each check); it scrolls with the text. A
// "Line n" button of the check puts the cursor at the start of that line.
(function () {
  "use strict";

  function failing() {
    var check = document.getElementById("payload-check");
    var said = check ? check.getAttribute("data-failing-lines") || "" : "";
    return said ? said.split(",").map(Number) : [];
  }

  function draw() {
    var editor = document.getElementById("payload");
    var gutter = document.querySelector("[data-gutter]");
    if (!editor || !gutter) {
      return;
    }
    var count = editor.value.split("\n").length;
    var marked = failing();
    gutter.textContent = "";
    for (var n = 1; n <= count; n++) {
      var line = document.createElement("span");
      line.textContent = String(n);
      if (marked.indexOf(n) >= 0) {
        line.className = "failing";
      }
      gutter.append(line, "\n");
    }
    gutter.scrollTop = editor.scrollTop;
  }

  document.addEventListener("input", function (event) {
    if (event.target && event.target.id === "payload") {
      draw();
    }
  });
  document.addEventListener("scroll", function (event) {
    var gutter = document.querySelector("[data-gutter]");
    if (gutter && event.target && event.target.id === "payload") {
      gutter.scrollTop = event.target.scrollTop;
    }
  }, true);
  document.addEventListener("htmx:afterSettle", function (event) {
    var target = event.detail && event.detail.target;
    if (target && (target.id === "payload-check" || !target.isConnected)) {
      draw();
    }
  });
  // A check the dashboard could not make (a payload past what it takes, the database away, the
  // entry purged meanwhile, no answer at all) says so in place of the last verdict, which no
  // longer speaks of the text; the status region too. Its answer is never swapped in: a bare
  // sentence in place of the panel left the next checks nowhere to go.
  function cannotCheck(target, said) {
    var sentence = "It could not be checked: " + said;
    var line = document.createElement("p");
    line.className = "error";
    line.textContent = sentence;
    target.replaceChildren(line);
    target.setAttribute("data-failing-lines", "");
    target.setAttribute("data-announce", sentence);
    draw();
    dlqPage.say(sentence);
  }

  function isCheck(event) {
    var target = event.detail && event.detail.target;
    return target && target.id === "payload-check" ? target : null;
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    var xhr = event.detail.xhr;
    if (isCheck(event) && xhr && xhr.status >= 400 && xhr.status !== 401) {
      event.detail.shouldSwap = false;
      event.detail.isError = true;  // then htmx:responseError, below
    }
  });
  document.addEventListener("htmx:responseError", function (event) {
    var target = isCheck(event), xhr = event.detail.xhr;
    if (!target || !xhr || xhr.status === 401) {
      return;
    }
    var said = /^text\/plain/.test(xhr.getResponseHeader("Content-Type") || "") ? xhr.responseText.trim() : "";
    cannotCheck(target, said || "the dashboard answered " + xhr.status + ".");
  });
  document.addEventListener("htmx:sendError", function (event) {
    var target = isCheck(event);
    if (target) {
      cannotCheck(target, "the dashboard did not answer.");
    }
  });
  document.addEventListener("click", function (event) {
    var button = event.target && event.target.closest && event.target.closest("[data-goto-line]");
    var editor = document.getElementById("payload");
    if (!button || !editor) {
      return;
    }
    var line = Number(button.getAttribute("data-goto-line"));
    var lines = editor.value.split("\n");
    var at = lines.slice(0, line - 1).join("\n").length + (line > 1 ? 1 : 0);
    editor.focus();
    editor.setSelectionRange(at, at + (lines[line - 1] || "").length);
    var height = parseFloat(getComputedStyle(editor).lineHeight) || 19;
    editor.scrollTop = Math.max(0, (line - 3) * height);
  });
})();

// --- Focus across a swap --------------------------------------------------------------------------
// A part swapped in place of the one that held the keyboard's focus keeps it where it was: on the
// same control in what came (its id, or its link and text, or its name and value), as a page that
// polls itself (a job's progress, the jobs) swaps the same controls every second. A control that
// is gone gives the focus to the part's first control (a row after its Close, the older rows after
// "Show older entries"), so a keyboard user goes on from there rather than from the top of the
// page; a part that polls itself takes it itself, never moving it onto another control (Cancel).
(function () {
  "use strict";

  var FOCUSABLE = "a[href], button:not([disabled]), input:not([type=hidden]):not([disabled]), select, textarea";
  var lost = null;  // where the focused part was: its parent and its place among its siblings, and what had it

  function described(element) {
    return { id: element.id, tag: element.tagName, href: element.getAttribute("href"),
             name: element.getAttribute("name"), value: element.getAttribute("value"),
             text: (element.textContent || "").trim() };
  }

  function same(part, was) {
    if (was.id) {
      var named = document.getElementById(was.id);
      return named && part.contains(named) ? named : null;
    }
    var candidates = [part].concat(Array.prototype.slice.call(part.querySelectorAll(was.tag)));
    return candidates.filter(function (element) {
      return element.tagName === was.tag && element.getAttribute("href") === was.href &&
        element.getAttribute("name") === was.name && element.getAttribute("value") === was.value &&
        (element.textContent || "").trim() === was.text;
    })[0] || null;
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    var target = event.detail && event.detail.target;
    var focused = document.activeElement;
    var inside = focused && focused !== document.body && target && target.contains(focused);
    if (target && target.parentNode && (target.hasAttribute("data-focus-back") || inside)) {
      var asker = (event.detail.elt || target).getAttribute("hx-trigger") || "";
      lost = { target: target, parent: target.parentNode, polled: /\bevery\b/.test(asker),
               index: Array.prototype.indexOf.call(target.parentNode.children, target),
               focused: inside && !target.hasAttribute("data-focus-back") ? described(focused) : null };
    }
  });

  // (htmx swaps in the task of beforeSwap and settles 20 ms later: whichever part settles first
  // finds the swap done.)
  document.addEventListener("htmx:afterSettle", function () {
    var was = lost;
    lost = null;
    if (!was || (document.activeElement && document.activeElement !== document.body)) {
      return;  // nothing was lost: the focus stayed, or the page moved it itself
    }
    // Swapped inside (innerHTML) the part is still there; in its place (outerHTML), what came.
    var part = was.target.isConnected ? was.target : was.parent.children[was.index];
    if (!part) {
      return;
    }
    var control = (was.focused && same(part, was.focused)) ||
      (was.polled ? null : part.matches(FOCUSABLE) ? part : part.querySelector(FOCUSABLE));
    if (!control && was.polled) {
      control = part;
    }
    if (control && !control.matches(FOCUSABLE) && !control.hasAttribute("tabindex")) {
      control.setAttribute("tabindex", "-1");  // a part as it came from the server (the poll after): focusable again
    }
    if (control) {
      control.focus({ preventScroll: true });
    }
  });
})();

// A table wider than its place scrolls sideways in its own box (.table-scroll, or on a phone the
// table itself): that box then takes the keyboard's focus, so that Tab reaches it and the arrow
// keys scroll it (a .table-scroll is named, role="region"); one that fits is no stop on the way.
(function () {
  "use strict";

  function mark(scroller) {
    var scrolls = /auto|scroll/.test(getComputedStyle(scroller).overflowX) &&
      scroller.scrollWidth > scroller.clientWidth + 1;
    if (scrolls) {
      scroller.setAttribute("tabindex", "0");
    } else if (scroller !== document.activeElement) {
      scroller.removeAttribute("tabindex");
    }
  }

  var watching = new ResizeObserver(function (changes) {
    changes.forEach(function (change) { mark(change.target); });
  });

  // Observing a box reports its size once at the start (the observer marks it then); a swap
  // marks only the boxes it brought or changed, not the page's every table at each poll.
  function markAll(root) {
    var within = root && root.isConnected ? root : document;
    within.querySelectorAll(".table-scroll, main table").forEach(function (scroller) {
      watching.observe(scroller);
    });
    var box = within.closest && within.closest(".table-scroll, main table");
    if (box) {
      mark(box);
    }
  }

  document.addEventListener("DOMContentLoaded", function () { markAll(document); });
  document.addEventListener("htmx:afterSwap", function (event) { markAll(event.detail && event.detail.target); });
})();

// --- What a replaced part says -------------------------------------------------------------------
// A part htmx replaces whole (a polled job, the editor's check, a list row after its action)
// cannot be a live region: a region put into the page is not read, or is read whole at each poll.
// It carries what a person must hear in data-announce instead; when that sentence differs from the
// one the part (by its id) said before, the page's one status region (#announcer, base.html)
// says it; when a part that carries data-announce-end goes (a banner's line), that is said. What
// the page said as it loaded is known, not read out.
(function () {
  "use strict";
  var said = new Map();
  var ends = new Map();  // what a part that says a trouble (data-announce-end) says when it goes

  function changed() {
    var sentences = [], here = new Set();
    document.querySelectorAll("[data-announce][id]").forEach(function (part) {
      var sentence = part.getAttribute("data-announce").trim();
      here.add(part.id);
      if (said.get(part.id) !== sentence) {
        said.set(part.id, sentence);
        if (sentence) { sentences.push(sentence); }
      }
    });
    said.forEach(function (_, id) {  // gone (a banner's line once it recovered): said again if it comes back
      if (!here.has(id)) {
        said.delete(id);
        if (ends.get(id)) { sentences.push(ends.get(id)); }  // "The database answers again."
      }
    });
    ends = new Map();
    document.querySelectorAll("[data-announce-end][id]").forEach(function (part) {
      ends.set(part.id, part.getAttribute("data-announce-end").trim());
    });
    return sentences;
  }

  document.addEventListener("DOMContentLoaded", changed);
  document.addEventListener("htmx:afterSettle", function () {
    var sentences = changed();
    if (sentences.length) {
      dlqPage.say(sentences.join(" "));
    }
  });
})();

// --- How long ago ----------------------------------------------------------------------------------
// "3 min ago" (web/templating.py relative) is written as the page is made: a list left open said
// its newest failure was "2 s ago" long after. Every 5 s each such time is said again from its
// exact time (its datetime), in the same words as the server's.
(function () {
  "use strict";

  var UNITS = [["d", 86400], ["h", 3600], ["min", 60]];

  function ago(seconds) {
    if (seconds < 0) {
      return seconds > -60 ? "just now" : null;  // far ahead (another clock): left as the server wrote it
    }
    for (var i = 0; i < UNITS.length; i++) {
      if (seconds >= UNITS[i][1]) {
        return Math.floor(seconds / UNITS[i][1]) + " " + UNITS[i][0] + " ago";
      }
    }
    return seconds + " s ago";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-ago]").forEach(function (time) {
      var at = Date.parse(time.getAttribute("datetime") || ""), text = time.querySelector("[data-ago-text]");
      var said = isNaN(at) || !text ? null : ago(Math.floor((now - at) / 1000));
      if (said !== null && text.textContent !== said) {
        text.textContent = said;
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () { window.setInterval(tick, 5000); });
})();
