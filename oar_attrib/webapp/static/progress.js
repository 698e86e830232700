// Keeps the background-fill line of the page current (text only: never markup).
(function () {
  const line = document.getElementById("progress-line");
  if (!line) return;
  async function poll() {
    try {
      const r = await fetch(line.dataset.poll, {headers: {accept: "application/json"}});
      if (r.ok) {
        const body = await r.json();
        line.textContent = body.line || "Finished filling this store: reload to see every run";
        if (body.finished) return;
      }
    } catch (e) { /* the server may be restarting: try again */ }
    setTimeout(poll, 5000);
  }
  setTimeout(poll, 5000);
})();
