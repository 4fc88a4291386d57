// Module resolution hook: a plugin that imports helpers from the `openclaw` package itself
// (`openclaw/plugin-sdk/core`, `openclaw/plugin-sdk/plugin-entry`, `openclaw`) gets the real
// package when it is installed where the plugin can resolve it, and this host's small
// implementation of those helpers (./sdk/) otherwise. Any other `openclaw/…` subpath that is
// not installed fails to load with "not supported by this host: <specifier>".
//
// A TypeScript module importing a sibling by its compiled name (`./client.js` from
// `index.ts`, the TypeScript convention) gets the `.ts` file when no `.js` file is there, as
// OpenClaw's own TypeScript loader resolves it.

const SHIMS = new Map([
  ["openclaw", "./sdk/index.mjs"],
  ["openclaw/plugin-sdk", "./sdk/index.mjs"],
  ["openclaw/plugin-sdk/core", "./sdk/index.mjs"],
  ["openclaw/plugin-sdk/plugin-entry", "./sdk/index.mjs"],
  ["openclaw/plugin-sdk/context-engine", "./sdk/index.mjs"],
]);

const TS_PARENT = /\.[cm]?ts$/;
const JS_SPECIFIER = /^\.{1,2}\/.*\.([cm]?)js$/;

async function resolveTypeScriptSibling(specifier, context, nextResolve) {
  try {
    return await nextResolve(specifier, context);
  } catch (error) {
    if (error?.code !== "ERR_MODULE_NOT_FOUND") throw error;
    const ts = specifier.replace(/\.([cm]?)js$/, ".$1ts");
    try {
      return await nextResolve(ts, context);
    } catch {
      throw error;
    }
  }
}

export async function resolve(specifier, context, nextResolve) {
  if (context.parentURL && TS_PARENT.test(new URL(context.parentURL).pathname) && JS_SPECIFIER.test(specifier)) {
    return resolveTypeScriptSibling(specifier, context, nextResolve);
  }
  if (specifier !== "openclaw" && !specifier.startsWith("openclaw/")) return nextResolve(specifier, context);
  try {
    return await nextResolve(specifier, context);
  } catch (error) {
    const shim = SHIMS.get(specifier);
    if (shim) return { url: new URL(shim, import.meta.url).href, shortCircuit: true };
    throw new Error(`not supported by this host: ${specifier} (install the openclaw package next to the plugin to use it)`, { cause: error });
  }
}
