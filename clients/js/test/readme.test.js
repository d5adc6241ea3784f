// Runs every ```js example of README.md against a real broker, in order,
// and compares its output with the ```text block that follows it.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { startBroker } from "./broker.js";

const pkg = resolve(dirname(fileURLToPath(import.meta.url)), "..");

let broker;
let dir;
before(async () => {
  broker = await startBroker();
  // Inside the package, so that the examples' "@combmq/comb" resolves to it.
  dir = await mkdtemp(join(pkg, ".readme-"));
});
after(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
  await broker?.stop();
});

test("the README's examples run and print what it says", async () => {
  const readme = await readFile(join(pkg, "README.md"), "utf8");
  const blocks = [...readme.matchAll(/```(\w+)\n([\s\S]*?)```/g)].map((m) => ({ lang: m[1], body: m[2] }));
  const examples = [];
  blocks.forEach((b, i) => {
    if (b.lang === "js") examples.push({ code: b.body, want: blocks[i + 1]?.lang === "text" ? blocks[i + 1].body : undefined });
  });
  assert.ok(examples.length >= 3, `found ${examples.length} examples`);
  for (const [i, ex] of examples.entries()) {
    const file = join(dir, `example-${i}.mjs`);
    await writeFile(file, ex.code);
    const { stdout } = await promisify(execFile)(process.execPath, [file], {
      env: { ...process.env, NATS_URL: broker.url },
      timeout: 30_000,
    }).catch((e) => assert.fail(`example ${i} failed: ${e.message}\n${e.stdout}\n${e.stderr}\n${ex.code}`));
    if (ex.want !== undefined) assert.equal(stdout, ex.want, `example ${i}:\n${ex.code}`);
  }
});
