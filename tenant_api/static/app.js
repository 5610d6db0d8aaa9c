/* The portal's only script: progressive touches; every form works without it. */
(function () {
  "use strict";
  document.documentElement.classList.add("js");

  // Show / hide the key being typed.
  document.querySelectorAll("[data-toggle-key]").forEach(function (button) {
    var input = document.getElementById(button.getAttribute("data-toggle-key"));
    if (!input) { return; }
    button.hidden = false;
    button.addEventListener("click", function () {
      var showing = input.type === "text";
      input.type = showing ? "password" : "text";
      button.textContent = button.getAttribute(showing ? "data-show" : "data-hide");
      button.setAttribute("aria-pressed", showing ? "false" : "true");
      input.focus();
    });
  });

  // A month picked in the chart's list shows that month at once.
  document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
    select.addEventListener("change", function () { select.form.submit(); });
  });

  // Hourly rows come as CSV, JSON or Parquet only (the API refuses an hourly PDF): grey it out.
  var usageForm = document.getElementById("usage-form");
  var pdfButton = document.getElementById("usage-pdf");
  if (usageForm && pdfButton) {
    var syncPdf = function () {
      var hourly = usageForm.querySelector("input[name=granularity][value=hour]");
      pdfButton.disabled = !!(hourly && hourly.checked);
    };
    usageForm.querySelectorAll("input[name=granularity]").forEach(function (radio) {
      radio.addEventListener("change", syncPdf);
    });
    syncPdf();
  }

  // Invoice and report links: mark the one being fetched until the browser has it.
  document.querySelectorAll("a.chip[download], .formats .btn").forEach(function (el) {
    el.addEventListener("click", function () {
      el.classList.add("is-busy");
      window.setTimeout(function () { el.classList.remove("is-busy"); }, 1500);
    });
  });
})();
