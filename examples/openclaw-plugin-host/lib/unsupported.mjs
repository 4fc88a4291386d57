// Members of the OpenClaw plugin api this host does not serve. They exist (so a plugin that
// reads them at load time loads), and fail when called with
// "not supported by this host: <member>".

import { NotSupportedError } from "./rpc.mjs";

// Property names that must not look like members: promise detection (`then`), JSON, and
// inspection. Reading them gives undefined, like on a plain function.
const NOT_MEMBERS = new Set(["then", "toJSON", "constructor", "prototype", "inspect", "valueOf", "toString", "asymmetricMatch", "$$typeof"]);

/**
 * A member that throws `not supported by this host: <name>` when called. Reading a property
 * of it gives a deeper unsupported member (`runtime.tasks.runs.list` names itself), so whole
 * unserved namespaces need no enumeration below the level the SDK types name.
 */
export function unsupported(name) {
  const fail = function unsupportedMember() {
    throw new NotSupportedError(name);
  };
  return new Proxy(fail, {
    get(target, prop, receiver) {
      if (typeof prop === "symbol" || NOT_MEMBERS.has(prop) || prop in Function.prototype) {
        return Reflect.get(target, prop, receiver);
      }
      return unsupported(`${name}.${prop}`);
    },
    apply() {
      throw new NotSupportedError(name);
    },
    construct() {
      throw new NotSupportedError(name);
    },
  });
}

/**
 * Builds a namespace object: every name in `names` that `served` does not provide becomes an
 * unsupported member named `<prefix>.<name>`; a served value that is itself a plain object
 * spec (`{names, served}`) is built recursively.
 */
export function namespace(prefix, names, served = {}) {
  const out = {};
  for (const name of names) {
    out[name] = name in served ? served[name] : unsupported(`${prefix}.${name}`);
  }
  for (const [name, value] of Object.entries(served)) {
    if (!(name in out)) out[name] = value;
  }
  return out;
}
