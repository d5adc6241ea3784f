// startBroker builds `comb` from this repository and runs `comb serve` as a
// child process on loopback, with a private PostgreSQL in a temporary data
// directory, the way a user would run it.

import { execFile, spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const readyRE = /msg="comb ready".* nats=(nats:\/\/\S+)/;

/**
 * Starts a broker. config, when given, is written to a file passed with
 * -config. Returns {url, log(), stop()}; stop sends SIGINT (the drain
 * Ctrl-C does), waits for the exit and removes the data directory.
 */
export async function startBroker({ config } = {}) {
  const dir = await mkdtemp(join(tmpdir(), "comb-js-test-"));
  const bin = join(dir, "comb");
  await promisify(execFile)("go", ["build", "-o", bin, "./cmd/comb"], { cwd: repoRoot });

  // Both ports are 0: the NATS listener and PostgreSQL take free ports, and
  // the ready line names the NATS URL, so no port is picked and then raced for.
  const args = ["serve", "-nats-listen", "127.0.0.1:0", "-nats-http", "0", "-http", "", "-pg-port", "0", "-data-dir", join(dir, "data")];
  if (config !== undefined) {
    const path = join(dir, "comb.conf");
    await writeFile(path, config, { mode: 0o600 });
    args.push("-config", path);
  }
  // The flags must win over a developer's COMB_ settings.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("COMB_")));
  const child = spawn(bin, args, { env, stdio: ["ignore", "ignore", "pipe"] });
  const lines = [];
  const exited = new Promise((res) => child.once("exit", (code, signal) => res({ code, signal })));
  // Should the test process end without after() (a crash), the broker still
  // gets its Ctrl-C and stops its PostgreSQL by itself; SIGKILL would leave
  // PostgreSQL running.
  const onExit = () => child.kill("SIGINT");
  process.once("exit", onExit);

  const url = await new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`comb serve not ready after 2 minutes:\n${lines.join("\n")}`)), 120_000);
    createInterface({ input: child.stderr }).on("line", (line) => {
      lines.push(line);
      const m = readyRE.exec(line);
      if (m) {
        clearTimeout(timer);
        res(m[1]);
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      rej(new Error(`comb serve exited (${code ?? signal}) before it was ready:\n${lines.join("\n")}`));
    });
  }).catch(async (e) => {
    child.kill("SIGINT");
    await exited;
    await rm(dir, { recursive: true, force: true });
    throw e;
  });

  let stopped;
  return {
    url,
    log: () => lines.join("\n"),
    stop() {
      stopped ??= (async () => {
        process.removeListener("exit", onExit);
        child.kill("SIGINT");
        const kill = setTimeout(() => child.kill("SIGKILL"), 60_000);
        const how = await exited;
        clearTimeout(kill);
        await rm(dir, { recursive: true, force: true });
        return how;
      })();
      return stopped;
    },
  };
}
