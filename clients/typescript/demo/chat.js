// A chat room over WebSocket with routerd-client's browser build: join a room, show every
// room.message, send what is typed with room.say.
import { Client } from "../dist/src/index.js";

const params = new URLSearchParams(location.search);
const room = BigInt(params.get("room") ?? "1");
const status = document.getElementById("status");
const log = document.getElementById("log");
const text = document.getElementById("text");
const send = document.getElementById("send");

function show(line, cls) {
  const item = document.createElement("li");
  item.textContent = line;
  if (cls) item.className = cls;
  log.append(item);
}

try {
  const client = await Client.connect(params.get("ws"), params.get("token"), {
    reconnect: { baseDelayMs: 100, maxDelayMs: 2000, attemptsMax: 10 },
  });
  client.on("room_message", (m) => {
    if (m.roomId === room) show(`player ${m.fromPlayerId}: ${m.text}`, "message");
  });
  client.on("disconnected", (e) => (status.textContent = `reconnecting (${e.message})`));
  client.on("reconnected", () => (status.textContent = `in room ${room} as player ${client.playerId}`));
  client.on("closed", (e) => (status.textContent = `closed${e ? `: ${e.message}` : ""}`));
  const members = await client.roomJoin(room);
  status.textContent = `in room ${room} as player ${client.playerId} (${members} members)`;
  status.dataset.ready = "true";
  text.disabled = send.disabled = false;
  document.getElementById("say").addEventListener("submit", async (event) => {
    event.preventDefault();
    const line = text.value;
    text.value = "";
    try {
      await client.roomSay(room, line);
    } catch (error) {
      show(`not sent: ${error.message}`, "error");
    }
  });
} catch (error) {
  status.textContent = `cannot join: ${error.message}`;
  status.dataset.ready = "failed";
}
