// Real `routerd serve` processes for the live tests: the binary named by ROUTERD_BIN, on loopback
// ports, sharing one SQLite file when they form a cluster.

import { spawn, ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const SECRET = "client-library-test-secret";
const START_TIMEOUT_MS = 20_000;

export const binary = (): string | undefined => process.env.ROUTERD_BIN;

/** Why the live tests cannot run here, or null; in CI a missing binary is a failure, not a skip. */
export function skipReason(): string | null {
  if (binary()) return null;
  if (process.env.CI) throw new Error("ROUTERD_BIN is not set: the live tests need the routerd binary");
  return "ROUTERD_BIN is not set";
}

export function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = createServer();
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as { port: number }).port;
      server.close(() => resolve(port));
    });
  });
}

export class Node {
  constructor(
    readonly process: ChildProcess,
    readonly gateway: string,
    readonly admin: string,
    readonly exited: Promise<number | null>,
  ) {}

  url(scheme = "tcp"): string {
    return `${scheme}://${this.gateway}`;
  }

  async post(path: string): Promise<number> {
    const response = await fetch(`http://${this.admin}${path}`, { method: "POST" });
    await response.text();
    return response.status;
  }

  async getJson(path: string): Promise<any> {
    const response = await fetch(`http://${this.admin}${path}`, { signal: AbortSignal.timeout(15_000) });
    return response.status === 200 ? response.json() : null;
  }

  /** SIGTERM, and SIGKILL if the node has not exited 15 s later (as the Python suite's nodes). */
  async stop(): Promise<number | null> {
    if (this.process.exitCode === null) this.process.kill("SIGTERM");
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, 15_000)));
    const exited = await Promise.race([this.exited.then(() => true), late.then(() => false)]);
    clearTimeout(timer);
    if (!exited) this.process.kill("SIGKILL");
    return this.exited;
  }
}

export class Cluster {
  readonly dir = mkdtempSync(join(tmpdir(), "routerd-client-test-"));
  readonly nodes: Node[] = [];
  private starts = 0;

  /** gatewayExtra: more keys of [gateway] (websocket_listen, say); extra: more sections ([scripts], say). */
  config(nodeId: number, gatewayPort: number, gatewayExtra: string, extra = ""): string {
    return [
      `[node]\nid = ${nodeId}\ndata_dir = ${JSON.stringify(join(this.dir, `data-${nodeId}`))}`,
      `[cores]\ncount = 1\nrecv_buffers = 64\nshutdown_deadline_ms = 3000`,
      `[store]\nbackend = "sqlite"\npath = ${JSON.stringify(join(this.dir, "cluster.db"))}\nsynchronous = "normal"`,
      `[cluster]\nlisten = "127.0.0.1:0"\nsecret = "the client tests' cluster secret"`,
      `heartbeat_interval_ms = 100\nfence_after_ms = 400\ndown_after_ms = 800\nredirect_grace_ms = 5000`,
      `[services.player]\npersist = "on_write"`,
      `[gateway]\nlisten = "127.0.0.1:${gatewayPort}"\n${gatewayExtra}`,
      `[admin]\nlisten = "127.0.0.1:0"`,
      `[auth]\nsecret = "${SECRET}"`,
      extra,
    ].join("\n");
  }

  start(nodeId: number, gatewayPort = 0, gatewayExtra = "", extra = ""): Promise<Node> {
    const path = binary();
    if (!path) throw new Error("ROUTERD_BIN names no routerd binary");
    this.starts += 1;
    const file = join(this.dir, `node-${nodeId}-${this.starts}.toml`);
    writeFileSync(file, this.config(nodeId, gatewayPort, gatewayExtra, extra));
    const env = { ...process.env };
    delete env.ROUTERD_AUTH_SECRET;
    const child = spawn(path, ["serve", "--config", file], { stdio: ["ignore", "ignore", "pipe"], env });
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    return new Promise((resolve, reject) => {
      const log: string[] = [];
      let found = false;
      const timer = setTimeout(() => {
        child.kill("SIGKILL");
        reject(new Error(`node ${nodeId} did not serve: ${log.slice(-20).join("\n")}`));
      }, START_TIMEOUT_MS);
      let partial = "";
      child.stderr!.on("data", (chunk: Buffer) => {
        const lines = (partial + chunk.toString()).split("\n");
        partial = lines.pop() ?? "";
        for (const line of lines) {
          log.push(line);
          if (log.length > 2000) log.shift();
          const gateway = /gateway=(\S+)/.exec(line);
          const admin = /admin=(\S+)/.exec(line);
          if (!found && gateway && admin) {
            found = true;
            clearTimeout(timer);
            const node = new Node(child, gateway[1], admin[1], exited);
            this.nodes.push(node);
            resolve(node);
          }
        }
      });
    });
  }

  async waitUp(node: Node, peers: number[], timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const cluster = await node.getJson("/cluster");
      if (cluster?.state === "up") {
        const states = new Map((cluster.members ?? []).map((m: any) => [m.node_id, m.state]));
        if (peers.every((peer) => states.get(peer) === "up")) return;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`members ${peers} not up`);
  }

  async close(): Promise<void> {
    await Promise.all(this.nodes.map((node) => node.stop()));
    rmSync(this.dir, { recursive: true, force: true });
  }
}
