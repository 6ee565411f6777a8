// The console's room browser and hottest objects: the rooms a node holds,
// a room's members and who of them is online (from the room's saved
// state, GET /objects/room/{id}), and the objects each node's requests
// name most (GET /hot-objects).

/** `api` is console.js's: { call, table, $, findPlayer, lookUp }. */
export function roomsPanel(api) {
  const { call, table, $ } = api;
  let after = null;

  async function list(next = false) {
    if (!next) after = null;
    const node = $("rooms-node").value;
    const query = new URLSearchParams({ limit: "50" });
    if (after != null) query.set("after", after);
    const answer = await call("GET", `/nodes/${node}/objects/room?${query}`);
    const out = $("rooms-list");
    if (!answer.ok) {
      out.textContent = `${answer.status}: ${JSON.stringify(answer.payload)}`;
      return;
    }
    after = answer.payload.next_after;
    $("rooms-next").disabled = after == null;
    // The rooms this node holds (a route cache names a room held elsewhere).
    const rooms = answer.payload.objects.filter((o) => o.writable);
    const t = table(
      ["room", "core", ""],
      rooms.map((o) => [o.id, o.core, ""]),
    );
    rooms.forEach((o, index) => {
      const open = document.createElement("button");
      open.textContent = "Members";
      open.className = "open-room";
      open.addEventListener("click", () => show(o.id));
      t.tBodies[0].rows[index].lastElementChild.appendChild(open);
    });
    out.replaceChildren(t);
  }

  /** Room `id`'s members as last saved, online ones first. */
  async function show(id) {
    const out = $("room-view");
    const answer = await call("GET", `/objects/room/${encodeURIComponent(id)}`);
    if (!answer.ok) {
      out.textContent = `${answer.status}: ${JSON.stringify(answer.payload)}`;
      return;
    }
    const o = answer.payload;
    const members = [...(o.state?.members ?? [])].sort((a, b) => b.online - a.online || a.player_id - b.player_id);
    const online = members.filter((m) => m.online).length;
    const heading = document.createElement("p");
    heading.id = "room-summary";
    heading.dataset.room = id;
    const saved = o.save_timepoint_ms ? new Date(o.save_timepoint_ms).toLocaleTimeString() : "never";
    heading.textContent = `Room ${id} on node ${o.owner}: ${members.length} members, ${online} online (saved ${saved})`;
    const t = table(
      ["player", "online", "session (node/id)", ""],
      members.map((m) => [m.player_id, m.online ? "yes" : "no", m.session ? `${m.session.gateway_node}/${m.session.session_id}` : "–", ""]),
    );
    t.id = "room-members";
    members.forEach((m, index) => {
      const find = document.createElement("button");
      find.textContent = "Sessions";
      find.addEventListener("click", () => api.findPlayer(m.player_id));
      t.tBodies[0].rows[index].lastElementChild.appendChild(find);
    });
    out.replaceChildren(heading, t);
  }

  $("rooms-form").addEventListener("submit", (event) => {
    event.preventDefault();
    list();
  });
  $("rooms-next").addEventListener("click", () => list(true));
}

/** Reads every live member's hottest objects and draws those of the scope
 * chosen ("cluster": all of them, by requests/s). */
export async function drawHot(api, members) {
  const { call, table, $ } = api;
  const live = members.filter((m) => m.state !== "left" && m.state !== "down");
  const scope = $("hot-scope").value || "cluster";
  const answers = await Promise.all(
    live
      .filter((m) => scope === "cluster" || scope === `node ${m.node_id}`)
      .map((m) => call("GET", `/nodes/${m.node_id}/hot-objects`).catch(() => ({ ok: false }))),
  );
  // A request is counted where it enters a node's router: the node of
  // its client's gateway and, sent on, the owner's. One row per object,
  // then, with the nodes that counted it and the most any one counted.
  const byKey = new Map();
  for (const answer of answers) {
    if (!answer.ok) continue;
    const { node_id: node, covered_ms: covered, objects } = answer.payload;
    for (const o of objects) {
      const perSecond = covered > 0 ? (o.requests * 1000) / covered : NaN;
      const key = `${o.type_id}/${o.zone_id}/${o.id}`;
      const seen = byKey.get(key);
      if (!seen) byKey.set(key, { ...o, node: String(node), perSecond });
      else {
        seen.node = `${seen.node}, ${node}`;
        if (o.requests > seen.requests) Object.assign(seen, { requests: o.requests, error: o.error, core: o.core, perSecond });
      }
    }
  }
  const rows = [...byKey.values()].sort((a, b) => b.requests - a.requests);
  const shown = rows.slice(0, 20);
  const t = table(
    ["type", "id", "nodes", "core", "requests/s", "requests (± overcount)", ""],
    shown.map((o) => [
      o.type ?? o.type_id,
      o.id,
      o.node,
      o.core,
      Number.isFinite(o.perSecond) ? o.perSecond.toFixed(1) : "–",
      o.error ? `${o.requests} (± ${o.error})` : o.requests,
      "",
    ]),
  );
  t.id = "hot-table";
  shown.forEach((o, index) => {
    const look = document.createElement("button");
    look.textContent = "Look up";
    look.addEventListener("click", () => api.lookUp(o.type ?? String(o.type_id), o.id));
    t.tBodies[0].rows[index].lastElementChild.appendChild(look);
  });
  $("hot").replaceChildren(t);
}
