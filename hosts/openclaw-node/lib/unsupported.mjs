// Members of the OpenClaw plugin api this host does not serve. They exist (so a plugin that
// reads them at load time loads). A registration seam (`register…`, `on…`) is accepted: the
// call is kept, logged once and reported to ctxbridge, which lists it in `doctor` ("registered
// but not offered by this host"), so registering a UI action or a provider never fails a
// load. Anything that needs an answer now fails with "not supported by this host: <member>".

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

/** Whether `name` registers something (a seam a plugin offers the host) rather than asks now. */
export function isRegistration(name) {
  return /^(register|on)[A-Z]/.test(name);
}

/**
 * A registration seam this host does not offer: accepts the call, keeps `{seam, args}` in
 * `unoffered` (a Map seam -> calls), and logs the seam once at info through `logInfo`.
 */
export function accepted(name, unoffered, logInfo) {
  return function acceptedRegistration(...args) {
    const calls = unoffered.get(name);
    if (calls) {
      calls.push(args);
      return undefined;
    }
    unoffered.set(name, [args]);
    logInfo(`registered but not offered by this host: ${name}`);
    return undefined;
  };
}

/**
 * Builds a namespace object: every name in `names` that `served` does not provide becomes an
 * unsupported member named `<prefix>.<name>` — or, given `accept` ({unoffered, logInfo}) and a
 * registration name, an accepted one; a served value that is itself a plain object spec
 * (`{names, served}`) is built recursively.
 */
export function namespace(prefix, names, served = {}, accept = undefined) {
  const out = {};
  for (const name of names) {
    const full = `${prefix}.${name}`;
    if (name in served) out[name] = served[name];
    else if (accept && isRegistration(name)) out[name] = accepted(full, accept.unoffered, accept.logInfo);
    else out[name] = unsupported(full);
  }
  for (const [name, value] of Object.entries(served)) {
    if (!(name in out)) out[name] = value;
  }
  return out;
}
