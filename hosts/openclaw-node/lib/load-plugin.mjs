// Finds and imports a plugin: a module file (ESM or CommonJS) or a package directory, and
// reads its entry in either shape OpenClaw accepts: a bare `register(api)` function or a
// plugin object `{id, name, description?, configSchema?, register}` (what
// `definePluginEntry` returns), as the default export, `module.exports`, or a named
// `register`. `openclaw.plugin.json` next to the entry (or at the package root) is the
// manifest: `id` and a JSON Schema `configSchema`.

import { existsSync, readFileSync, statSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

function readJson(file) {
  return JSON.parse(readFileSync(file, "utf8"));
}

/** Resolves a plugin path (file or package dir) to `{entryFile, rootDir, manifest, packageJson}`. */
export function resolvePluginPath(pluginPath) {
  let target = path.resolve(pluginPath);
  let rootDir;
  let packageJson;
  if (statSync(target).isDirectory()) {
    rootDir = target;
    const pkgFile = path.join(target, "package.json");
    packageJson = existsSync(pkgFile) ? readJson(pkgFile) : undefined;
    const declared = packageJson?.openclaw?.extensions?.[0] ?? packageJson?.main;
    const candidates = declared ? [declared] : ["index.mjs", "index.js", "index.cjs", "index.ts"];
    const found = candidates.map((c) => path.join(target, c)).find((c) => existsSync(c));
    if (!found) throw new Error(`${pluginPath}: no plugin entry (package.json openclaw.extensions / main, or index.mjs/js/cjs)`);
    target = found;
  } else {
    rootDir = path.dirname(target);
    // The package root is the nearest directory with a package.json or manifest.
    for (let dir = rootDir; ; dir = path.dirname(dir)) {
      if (existsSync(path.join(dir, "openclaw.plugin.json")) || existsSync(path.join(dir, "package.json"))) {
        rootDir = dir;
        break;
      }
      if (path.dirname(dir) === dir) break;
    }
    const pkgFile = path.join(rootDir, "package.json");
    packageJson = existsSync(pkgFile) ? readJson(pkgFile) : undefined;
  }
  const manifestFile = [path.dirname(target), rootDir].map((d) => path.join(d, "openclaw.plugin.json")).find((f) => existsSync(f));
  const manifest = manifestFile ? readJson(manifestFile) : undefined;
  return { entryFile: target, rootDir, manifest, packageJson };
}

/**
 * The Node version a plugin's package.json asks for (`engines.node`, a `>=X.Y.Z` lower bound),
 * checked before its code is imported so an old Node gives a clear error instead of a missing
 * built-in module. Returns an error message, or null when satisfied or not stated.
 */
export function checkNodeEngine(packageJson, current = process.versions.node) {
  const range = packageJson?.engines?.node;
  const match = typeof range === "string" ? /^\s*>=\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?\s*$/.exec(range) : null;
  if (!match) return null;
  const want = match.slice(1).map((n) => Number(n ?? 0));
  const have = current.split(".").map(Number);
  for (let i = 0; i < 3; i += 1) {
    if (have[i] > want[i]) return null;
    if (have[i] < want[i]) {
      return `plugin ${packageJson.name ?? ""} needs Node ${range.trim()} (package.json engines.node); this host runs on Node ${current}`;
    }
  }
  return null;
}

/**
 * Imports the entry and normalises it to `{id?, name?, description?, version?, configSchema?,
 * register}`. A `configSchema` given as a function (definePluginEntry accepts a lazy one) is
 * called.
 */
export async function loadPluginEntry(entryFile) {
  const module = await import(pathToFileURL(entryFile).href);
  let exported = module.default ?? module;
  // CommonJS compiled from ESM: module.exports = {__esModule: true, default: entry}.
  if (exported && typeof exported === "object" && exported.__esModule && exported.default) exported = exported.default;
  if (exported && typeof exported === "object" && typeof exported.register !== "function" && typeof exported.default === "object") {
    exported = exported.default;
  }
  let entry;
  if (typeof exported === "function") {
    entry = { register: exported };
  } else if (exported && typeof exported === "object" && typeof exported.register === "function") {
    entry = exported;
  } else if (typeof module.register === "function") {
    entry = { register: module.register };
  } else {
    throw new Error(`${entryFile}: the default export is neither register(api) nor a plugin object {id, register}`);
  }
  let configSchema = entry.configSchema;
  if (typeof configSchema === "function") configSchema = configSchema();
  return {
    id: entry.id,
    name: entry.name,
    description: entry.description,
    version: entry.version,
    configSchema,
    register: entry.register,
  };
}
