// A sample context-engine plugin written to the OpenClaw plugin API: "recent-window" keeps the
// newest `windowSize` messages of each session and tells the model, in systemPromptAddition,
// how much older conversation it left out. It does not own compaction: `compact` hands over to
// the host runtime's compaction when the host offers it.
//
// Config (plugins.entries["recent-window"].config, which the plugin reads as api.pluginConfig):
//   windowSize  number of newest messages shown (default 8)
//   projection  "per_turn" (default) or "thread_bootstrap"

export default function register(api) {
  api.registerContextEngine("recent-window", () => createRecentWindowEngine({ config: api.pluginConfig }));
}

function createRecentWindowEngine({ config = {} } = {}) {
  const windowSize = Number.isInteger(config.windowSize) && config.windowSize > 0 ? config.windowSize : 8;
  const projection = config.projection === "thread_bootstrap" ? "thread_bootstrap" : "per_turn";
  const sessions = new Map(); // sessionId -> {messages, ids: Set, windowStart}

  const session = (sessionId) => {
    let s = sessions.get(sessionId);
    if (!s) {
      s = { messages: [], ids: new Set(), windowStart: 0 };
      sessions.set(sessionId, s);
    }
    return s;
  };

  const store = (s, message) => {
    if (message.id) {
      if (s.ids.has(message.id)) return false;
      s.ids.add(message.id);
    }
    s.messages.push(message);
    return true;
  };

  const textOf = (message) => {
    if (typeof message.content === "string") return message.content;
    if (Array.isArray(message.content)) {
      return message.content.filter((p) => p?.type === "text").map((p) => p.text).join(" ");
    }
    return message.summary ?? "";
  };

  return {
    info: {
      id: "recent-window",
      name: "Recent Window (sample plugin)",
      version: "1.0.0",
      ownsCompaction: false,
    },

    async ingest({ sessionId, message, isHeartbeat }) {
      if (isHeartbeat || !message) return { ingested: false };
      return { ingested: store(session(sessionId), message) };
    },

    async ingestBatch({ sessionId, messages = [], isHeartbeat }) {
      if (isHeartbeat) return { ingestedCount: 0 };
      const s = session(sessionId);
      return { ingestedCount: messages.filter((m) => store(s, m)).length };
    },

    async afterTurn({ sessionId, messages = [] }) {
      const s = session(sessionId);
      for (const message of messages) store(s, message);
    },

    async assemble({ sessionId, messages = [] }) {
      const s = session(sessionId);
      const source = s.messages.length > 0 ? s.messages : messages;
      const window = source.slice(-windowSize);
      const omitted = source.length - window.length;
      const chars = window.reduce((n, m) => n + textOf(m).length, 0);
      const result = { messages: window, estimatedTokens: Math.ceil(chars / 4) };
      if (projection === "thread_bootstrap") {
        // The window moves in steps of windowSize, so the thread is reused between steps. The
        // systemPromptAddition only changes with the step too: text that changed every turn
        // would be new developer instructions for the thread on every turn.
        const step = Math.floor(Math.max(0, source.length - 1) / windowSize);
        result.contextProjection = { mode: "thread_bootstrap", epoch: `window-${step}` };
        result.systemPromptAddition =
          step === 0
            ? "The whole conversation is shown."
            : `Only recent messages are shown; older ones were left out (window ${step}).`;
      } else {
        result.contextProjection = { mode: "per_turn" };
        result.systemPromptAddition =
          omitted > 0
            ? `Only the ${window.length} most recent messages are shown; ${omitted} older ones were left out.`
            : `The whole conversation (${window.length} messages) is shown.`;
      }
      return result;
    },

    async compact(params) {
      const delegate = params.runtimeContext?.delegateCompaction;
      if (typeof delegate === "function") {
        const { runtimeContext, abortSignal, ...rest } = params;
        return delegate(rest);
      }
      return { ok: true, compacted: false, reason: "recent-window does not own compaction and no runtime compaction is available" };
    },

    async dispose() {
      sessions.clear();
    },
  };
}
