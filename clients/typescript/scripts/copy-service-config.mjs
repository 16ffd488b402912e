// The shared service config (retry policy, per-method timeouts) lives once, in the Python
// client's package data; the build puts a copy into dist/ so that the built package carries it (nothing is copied
// into the sources, and no number of it is written in TypeScript).
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const source = join(here, "..", "..", "python", "wm_client", "data", "wm_grpc_service_config.json");
const target = join(here, "..", "dist", "wm_grpc_service_config.json");
mkdirSync(dirname(target), { recursive: true });
copyFileSync(source, target);
