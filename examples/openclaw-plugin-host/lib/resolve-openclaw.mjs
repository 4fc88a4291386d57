// Module resolution hook: a plugin that imports helpers from the `openclaw` package itself
// (`openclaw/plugin-sdk/core`, `openclaw/plugin-sdk/plugin-entry`, `openclaw`) gets the real
// package when it is installed where the plugin can resolve it, and this host's small
// implementation of those helpers (./sdk/) otherwise. Any other `openclaw/…` subpath that is
// not installed fails to load with "not supported by this host: <specifier>".

const SHIMS = new Map([
  ["openclaw", "./sdk/index.mjs"],
  ["openclaw/plugin-sdk", "./sdk/index.mjs"],
  ["openclaw/plugin-sdk/core", "./sdk/index.mjs"],
  ["openclaw/plugin-sdk/plugin-entry", "./sdk/index.mjs"],
  ["openclaw/plugin-sdk/context-engine", "./sdk/index.mjs"],
]);

export async function resolve(specifier, context, nextResolve) {
  if (specifier !== "openclaw" && !specifier.startsWith("openclaw/")) return nextResolve(specifier, context);
  try {
    return await nextResolve(specifier, context);
  } catch (error) {
    const shim = SHIMS.get(specifier);
    if (shim) return { url: new URL(shim, import.meta.url).href, shortCircuit: true };
    throw new Error(`not supported by this host: ${specifier} (install the openclaw package next to the plugin to use it)`, { cause: error });
  }
}
