// Where an engine keeps its files. Each engine gets its own state dir under ctxbridge's:
// `initialize.stateDir`, else `OPENCLAW_STATE_DIR` from the environment, else
// `<agentDir>/engines/<engineId>`, else `.ctxbridge/engines/<engineId>` under the working
// directory (next to ctxbridge's default store). HOME and the temp dir are redirected under it, so a plugin
// that writes to `os.homedir()` or `os.tmpdir()` writes there, not to the user's home or the
// system temp dir.

import { mkdirSync } from "node:fs";
import path from "node:path";

const safeName = (id) => String(id || "engine").replace(/[^A-Za-z0-9._-]/g, "_");

/**
 * Resolves the engine's directories, creates them and points the process environment at
 * them (`OPENCLAW_STATE_DIR`, `HOME`, `USERPROFILE`, `TMPDIR`, `TMP`, `TEMP`). Must run before
 * the plugin module is imported. Returns `{stateDir, agentDir, workspaceDir, homeDir, tmpDir}`.
 */
export function setUpStateDir(params, env = process.env) {
  const engineId = safeName(params.engineId);
  const stateDir = path.resolve(
    params.stateDir ??
      env.OPENCLAW_STATE_DIR ??
      (params.agentDir ? path.join(params.agentDir, "engines", engineId) : path.join(".ctxbridge", "engines", engineId)),
  );
  const agentDir = path.resolve(params.agentDir ?? path.join(stateDir, "agent"));
  const workspaceDir = params.workspaceDir ? path.resolve(params.workspaceDir) : undefined;
  const homeDir = path.join(stateDir, "home");
  const tmpDir = path.join(stateDir, "tmp");
  for (const dir of [stateDir, agentDir, homeDir, tmpDir]) mkdirSync(dir, { recursive: true });
  env.OPENCLAW_STATE_DIR = stateDir;
  env.OPENCLAW_AGENT_DIR = agentDir;
  env.HOME = homeDir;
  env.USERPROFILE = homeDir;
  env.TMPDIR = tmpDir;
  env.TMP = tmpDir;
  env.TEMP = tmpDir;
  return { stateDir, agentDir, workspaceDir, homeDir, tmpDir };
}
