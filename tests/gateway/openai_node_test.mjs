// SPDX-License-Identifier: Apache-2.0
// openai_node_test.mjs: the official OpenAI Node.js client, unchanged, against the tagflow
// gateway (tests/gateway/test_openai_node.py starts the server and passes its URL and token).
//   node openai_node_test.mjs OPENAI_INDEX_MJS BASE_URL TOKEN MODEL
// Each check prints "ok: ..." or "FAIL: ..."; exit 1 when any failed.
const [lib, baseURL, apiKey, model] = process.argv.slice(2);
const { default: OpenAI } = await import(lib);
let failed = 0;
function check(cond, msg) {
    console.log((cond ? "ok: " : "FAIL: ") + msg);
    if (!cond) failed++;
}
async function error_of(p) {
    try {
        await p;
        return null;
    } catch (e) {
        return e;
    }
}
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });

const models = await client.models.list();
check(models.data.some((m) => m.id === model), `models.list() names ${model}: ${models.data.map((m) => m.id)}`);
const one = await client.models.retrieve(model);
check(one.id === model && one.object === "model", "models.retrieve()");

// Completions: greedy, then the same prompt streamed — the same tokens chunk by chunk.
const prompt = "12+30=";
const c = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 0 });
const ids = c.tagflow.token_ids;
check(c.object === "text_completion" && typeof c.choices[0].text === "string" && ids.length >= 1 && ids.length <= 6,
      `completions.create(): ${ids.length} tokens, finish_reason ${c.choices[0].finish_reason}`);
check(c.tagflow.logprobs.length === ids.length && c.tagflow.logprobs.every((x) => x <= 0),
      "the tagflow extension field carries one log-probability per token");
const s = await client.completions.create({ model, prompt, max_tokens: 6, temperature: 0, stream: true });
let text = "", sids = [];
for await (const chunk of s) {
    text += chunk.choices[0]?.text ?? "";
    sids.push(...(chunk.tagflow?.token_ids ?? []));
}
check(JSON.stringify(sids) === JSON.stringify(ids) && text === c.choices[0].text,
      `completions.create({stream: true}) streams the same greedy tokens (${sids.length})`);

// Chat, plain and streamed.
const messages = [{ role: "system", content: "add" }, { role: "user", content: "7+5=" }];
const ch = await client.chat.completions.create({ model, messages, max_tokens: 5, temperature: 0 });
check(ch.object === "chat.completion" && ch.choices[0].message.role === "assistant" &&
      typeof ch.choices[0].message.content === "string", "chat.completions.create()");
const cs = await client.chat.completions.create({ model, messages, max_tokens: 5, temperature: 0, stream: true });
let content = "", n = 0, role = null;
for await (const chunk of cs) {
    n++;
    role = role ?? chunk.choices[0]?.delta?.role ?? null;
    content += chunk.choices[0]?.delta?.content ?? "";
}
check(n >= 2 && role === "assistant" && content === ch.choices[0].message.content,
      `chat stream: ${n} chunks, the same content as the plain call`);

// A session continued through the client's own header option, then its reward via client.post.
const t1 = await client.completions.create({ model, prompt: "9+1=", max_tokens: 3 },
                                           { headers: { "X-Tagflow-Session": "node-agent-1" } });
check(t1.tagflow.session === "node-agent-1", "a per-request header sets the session");
const rw = await client.post("/rewards", { body: { session: "node-agent-1", reward: 1 } });
check(rw.accepted === true, "client.post('/rewards') reports the session's reward");

// Errors arrive as the client's typed errors.
const bad = new OpenAI({ baseURL, apiKey: apiKey.slice(0, -1) + (apiKey.endsWith("0") ? "1" : "0"), maxRetries: 0 });
let e = await error_of(bad.models.list());
check(e instanceof OpenAI.AuthenticationError && e.status === 401, `wrong key -> AuthenticationError (${e?.status})`);
e = await error_of(client.completions.create({ model: "no-such-model", prompt: "x" }));
check(e instanceof OpenAI.NotFoundError && /no-such-model/.test(e.message), `unknown model -> NotFoundError: ${e?.message}`);
e = await error_of(client.completions.create({ model, prompt: "x".repeat(400), max_tokens: 4 }));
check(e instanceof OpenAI.BadRequestError && e.status === 400, `prompt longer than the context -> BadRequestError: ${e?.message}`);
e = await error_of(client.completions.create({ model, prompt: "x", max_tokens: -3 }));
check(e instanceof OpenAI.BadRequestError, `max_tokens -3 -> BadRequestError: ${e?.message}`);

// Concurrency: 8 requests at once, all served.
const many = await Promise.all(Array.from({ length: 8 }, (_, i) =>
    client.completions.create({ model, prompt: `${i}+${i}=`, max_tokens: 4 })));
check(many.every((r) => r.choices.length === 1 && r.tagflow.token_ids.length >= 1), "8 concurrent completions served");
console.log(failed ? `${failed} check(s) failed` : "all openai-node checks passed");
process.exit(failed ? 1 : 0);
