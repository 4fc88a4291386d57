// Applies a plugin's config schema to the entry's `config`, the way OpenClaw's plugin SDK
// defines it (`OpenClawPluginConfigSchema`): a Zod-like `safeParse`, a `parse` that throws, a
// `validate` returning `{ok, value?} | {ok: false, errors}`, or only `jsonSchema` metadata. The
// manifest (`openclaw.plugin.json`, `configSchema`) carries a JSON Schema too. Errors name the
// key they are about.

/**
 * Validates `value` against `schema` (the entry's runtime `configSchema`) and/or `jsonSchema`
 * (the manifest's). Returns `{ok: true, value}` (the parsed value, defaults applied) or
 * `{ok: false, errors: [{path, message}]}` where `path` is the dotted key (`"<root>"` for the
 * whole config).
 */
export function applyConfigSchema({ schema, jsonSchema, value }) {
  const input = value ?? {};
  if (schema && typeof schema === "object") {
    if (typeof schema.safeParse === "function") {
      const result = schema.safeParse(input);
      if (result?.success) return { ok: true, value: result.data ?? input };
      const issues = result?.error?.issues ?? [];
      const errors = issues.length
        ? issues.map((issue) => ({ path: keyPath(issue.path), message: issue.message ?? "invalid" }))
        : [{ path: "<root>", message: result?.error?.message ?? "invalid config" }];
      return { ok: false, errors };
    }
    if (typeof schema.parse === "function") {
      try {
        const parsed = schema.parse(input);
        return { ok: true, value: parsed ?? input };
      } catch (error) {
        const issues = Array.isArray(error?.issues) ? error.issues : [];
        const errors = issues.length
          ? issues.map((issue) => ({ path: keyPath(issue.path), message: issue.message ?? "invalid" }))
          : [{ path: "<root>", message: error?.message ?? String(error) }];
        return { ok: false, errors };
      }
    }
    if (typeof schema.validate === "function") {
      const result = schema.validate(input);
      if (result?.ok) return { ok: true, value: result.value ?? input };
      const errors = (result?.errors ?? ["invalid config"]).map(splitKeyedMessage);
      return { ok: false, errors };
    }
    if (schema.jsonSchema && typeof schema.jsonSchema === "object") {
      jsonSchema = schema.jsonSchema;
    }
  }
  if (jsonSchema && typeof jsonSchema === "object") {
    const errors = [];
    const withDefaults = validateJsonSchema(jsonSchema, structuredClone(input), [], errors);
    return errors.length ? { ok: false, errors } : { ok: true, value: withDefaults };
  }
  return { ok: true, value: input };
}

/** One line naming every failing key: `windowSize: must be >= 1; mode: must be one of …`. */
export function formatConfigErrors(errors) {
  return errors.map((e) => `${e.path}: ${e.message}`).join("; ");
}

function keyPath(path) {
  return Array.isArray(path) && path.length ? path.join(".") : "<root>";
}

// `validate` returns plain strings; OpenClaw writes them as "<key>: <message>".
function splitKeyedMessage(text) {
  const match = /^([^\s:]+):\s*(.*)$/s.exec(String(text));
  return match ? { path: match[1], message: match[2] } : { path: "<root>", message: String(text) };
}

const typeOf = (v) => (v === null ? "null" : Array.isArray(v) ? "array" : Number.isInteger(v) ? "integer" : typeof v);

function typeMatches(expected, v) {
  const actual = typeOf(v);
  if (expected === "number") return actual === "number" || actual === "integer";
  return expected === actual;
}

// A JSON Schema subset (the keywords plugin config schemas use): type, properties, required,
// additionalProperties, enum, const, numeric and length bounds, pattern, items, default.
function validateJsonSchema(schema, value, path, errors) {
  const at = keyPath(path);
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!types.some((t) => typeMatches(t, value))) {
      errors.push({ path: at, message: `must be ${types.join(" or ")}, got ${typeOf(value)}` });
      return value;
    }
  }
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    errors.push({ path: at, message: `must be one of ${schema.enum.map((e) => JSON.stringify(e)).join(", ")}` });
  }
  if ("const" in schema && JSON.stringify(schema.const) !== JSON.stringify(value)) {
    errors.push({ path: at, message: `must be ${JSON.stringify(schema.const)}` });
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) errors.push({ path: at, message: `must be >= ${schema.minimum}` });
    if (schema.maximum !== undefined && value > schema.maximum) errors.push({ path: at, message: `must be <= ${schema.maximum}` });
    if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) errors.push({ path: at, message: `must be > ${schema.exclusiveMinimum}` });
    if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) errors.push({ path: at, message: `must be < ${schema.exclusiveMaximum}` });
  }
  if (typeof value === "string") {
    if (schema.minLength !== undefined && value.length < schema.minLength) errors.push({ path: at, message: `must be at least ${schema.minLength} characters` });
    if (schema.maxLength !== undefined && value.length > schema.maxLength) errors.push({ path: at, message: `must be at most ${schema.maxLength} characters` });
    if (schema.pattern !== undefined && !new RegExp(schema.pattern, "u").test(value)) errors.push({ path: at, message: `must match ${schema.pattern}` });
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) errors.push({ path: at, message: `must have at least ${schema.minItems} items` });
    if (schema.maxItems !== undefined && value.length > schema.maxItems) errors.push({ path: at, message: `must have at most ${schema.maxItems} items` });
    if (schema.items && typeof schema.items === "object") {
      value = value.map((item, i) => validateJsonSchema(schema.items, item, [...path, i], errors));
    }
  }
  if (typeOf(value) === "object") {
    const properties = schema.properties ?? {};
    for (const key of schema.required ?? []) {
      if (!(key in value)) errors.push({ path: keyPath([...path, key]), message: "is required" });
    }
    for (const [key, sub] of Object.entries(properties)) {
      if (key in value) value[key] = validateJsonSchema(sub, value[key], [...path, key], errors);
      else if (sub && "default" in sub) value[key] = structuredClone(sub.default);
    }
    for (const key of Object.keys(value)) {
      if (key in properties) continue;
      if (schema.additionalProperties === false) {
        errors.push({ path: keyPath([...path, key]), message: "is not a known key" });
      } else if (schema.additionalProperties && typeof schema.additionalProperties === "object") {
        value[key] = validateJsonSchema(schema.additionalProperties, value[key], [...path, key], errors);
      }
    }
  }
  return value;
}
