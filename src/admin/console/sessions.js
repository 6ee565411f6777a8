// The console's sessions panel: a node's sessions a page at a time (back
// and forth), a player's sessions found on every member
// (GET /sessions?player=N&scope=cluster), and per session a Kick and a
// Push (a room.message of room 0 from the system, to that session only).

const PAGE_ROWS = 50;

/** `api` is console.js's: { call, table, say, $ }. */
export function sessionsPanel(api) {
  const { call, table, say, $ } = api;
  /** The cursors of the pages shown so far: [null, after of page 2, ...]. */
  let cursors = [null];
  let next = null;

  /** A row's Kick and Push buttons, for a logged-in session of `node`. */
  function actions(node, r) {
    const kick = document.createElement("button");
    kick.textContent = "Kick";
    kick.className = "kick";
    kick.addEventListener("click", () => kickSession(node, r.session_id, r.player_id));
    const push = document.createElement("button");
    push.textContent = "Push";
    push.className = "push";
    push.addEventListener("click", () => pushTo(node, r.session_id, r.player_id));
    return [kick, push];
  }

  function listed(rows, nodeOf) {
    const t = table(
      ["session", "core", "player", "epoch", "in flight", "node", ""],
      rows.map((r) => [r.session_id, r.core, r.player_id || "(not logged in)", r.session_epoch, r.inflight, nodeOf(r), ""]),
    );
    t.classList.add("sessions");
    rows.forEach((r, index) => {
      if (r.player_id) t.tBodies[0].rows[index].lastElementChild.append(...actions(nodeOf(r), r));
    });
    return t;
  }

  /** The page of `cursors[page]` on the node chosen (of one player, if given). */
  async function showPage(page) {
    const node = $("sessions-node").value;
    const player = $("sessions-player").value.trim();
    const query = new URLSearchParams({ limit: String(PAGE_ROWS) });
    if (player !== "") query.set("player", player);
    if (cursors[page] != null) query.set("after", cursors[page]);
    const answer = await call("GET", `/nodes/${node}/sessions?${query}`);
    const out = $("sessions-result");
    if (!answer.ok) {
      out.textContent = `${answer.status}: ${JSON.stringify(answer.payload)}`;
      return;
    }
    const s = answer.payload;
    cursors = cursors.slice(0, page + 1);
    next = s.next_after;
    $("sessions-next").disabled = next == null;
    $("sessions-previous").disabled = page === 0;
    const first = page * PAGE_ROWS + 1;
    const counts = document.createElement("p");
    counts.id = "sessions-page";
    counts.dataset.page = page + 1;
    counts.textContent =
      `Page ${page + 1}: ${s.sessions.length ? `${first}–${first + s.sessions.length - 1}` : "none"} of ${s.total} sessions (` +
      s.cores.map((c) => `core ${c.core} ${c.sessions}`).join(", ") +
      ")";
    out.replaceChildren(counts, listed(s.sessions, () => node));
  }

  /** A player's sessions on every member. */
  async function findEverywhere() {
    const player = $("sessions-player").value.trim();
    const out = $("sessions-result");
    if (player === "") {
      out.textContent = "Say which player to find on every node.";
      return;
    }
    const answer = await call("GET", `/sessions?player=${encodeURIComponent(player)}&scope=cluster`);
    if (!answer.ok) {
      out.textContent = `${answer.status}: ${JSON.stringify(answer.payload)}`;
      return;
    }
    const rows = [];
    const failed = [];
    for (const node of answer.payload.nodes) {
      if (node.error) failed.push(`node ${node.node_id}: ${node.error} (${node.reason})`);
      else for (const r of node.sessions) rows.push({ ...r, node_id: node.node_id });
    }
    const said = document.createElement("p");
    said.id = "sessions-page";
    said.textContent =
      `Player ${player}: ${rows.length} session(s) on ${answer.payload.nodes.length} node(s)` +
      (failed.length ? `; not answered: ${failed.join("; ")}` : "");
    $("sessions-next").disabled = true;
    $("sessions-previous").disabled = true;
    out.replaceChildren(said, listed(rows, (r) => r.node_id));
  }

  async function kickSession(node, sessionId, playerId) {
    if (!confirm(`Close session ${sessionId} of player ${playerId}? The client reads sys.kicked.`)) return;
    const answer = await call("POST", `/nodes/${node}/sessions/${sessionId}/kick?player=${playerId}`);
    say(
      answer.ok
        ? `Session ${sessionId} of player ${playerId} on node ${node} kicked.`
        : `Kick of session ${sessionId} refused (${answer.status}): ${JSON.stringify(answer.payload)}`,
      !answer.ok,
    );
    refresh();
  }

  async function pushTo(node, sessionId, playerId) {
    const text = $("push-text").value;
    if (text === "") {
      say("Write the text to push first (the box beside Show).", true);
      return;
    }
    const answer = await call("POST", `/nodes/${node}/sessions/${sessionId}/push?player=${playerId}`, text);
    say(
      answer.ok
        ? `Pushed to session ${sessionId} of player ${playerId} on node ${node}.`
        : `Push to session ${sessionId} refused (${answer.status}): ${JSON.stringify(answer.payload)}`,
      !answer.ok,
    );
  }

  /** Shows what the form asks again: the page shown, or the search. */
  function refresh() {
    if ($("sessions-everywhere").checked) findEverywhere();
    else showPage(cursors.length - 1);
  }

  $("sessions-form").addEventListener("submit", (event) => {
    event.preventDefault();
    cursors = [null];
    refresh();
  });
  $("sessions-next").addEventListener("click", () => {
    if (next == null) return;
    cursors.push(next);
    showPage(cursors.length - 1);
  });
  $("sessions-previous").addEventListener("click", () => {
    if (cursors.length > 1) showPage(cursors.length - 2);
  });
}
