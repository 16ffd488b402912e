// Fails when `buf generate` would change a byte of src/gen: regenerates into a temporary
// folder with the same template and compares every file both ways (missing, extra, different).
// BUF names the buf binary (default: the repository's .venv/bin/buf).
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, "..", "..", "..");
const committed = join(here, "..", "src", "gen");
const buf = process.env.BUF ? resolve(process.env.BUF) : join(repo, ".venv", "bin", "buf");

function files(root) {
  const out = new Map();
  const walk = (dir) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else out.set(relative(root, path), readFileSync(path));
    }
  };
  walk(root);
  return out;
}

const scratch = mkdtempSync(join(tmpdir(), "wm-ts-gen-"));
try {
  execFileSync(buf, ["generate", "--template", "clients/typescript/buf.gen.yaml", "-o", scratch], {
    cwd: repo,
    stdio: "inherit",
  });
  const fresh = files(join(scratch, "clients", "typescript", "src", "gen"));
  const present = files(committed);
  const problems = [];
  for (const [name, bytes] of fresh) {
    if (!present.has(name)) problems.push(`missing: ${name}`);
    else if (!bytes.equals(present.get(name))) problems.push(`differs: ${name}`);
  }
  for (const name of present.keys()) if (!fresh.has(name)) problems.push(`unexpected: ${name}`);
  if (problems.length) {
    console.error("clients/typescript/src/gen is out of date (run `npm run generate`):");
    for (const line of problems) console.error(`  ${line}`);
    process.exit(1);
  }
  console.log(`clients/typescript/src/gen matches buf generate (${fresh.size} files)`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
