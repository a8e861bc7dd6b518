// server.mjs serves one GGUF model through llama.cpp (node-llama-cpp) with
// the subset of vLLM's OpenAI-compatible HTTP API that Vigil's tests use.
//
//   VIGIL_LLAMACPP_DIR=DIR node server.mjs --model PATH --name NAME --port N [--host 127.0.0.1] [--ctx N] [--threads 1]
//
// Routes: GET /health, GET /v1/models, POST /tokenize, POST /v1/completions,
// POST /v1/chat/completions (non-streaming). Requests are served one at a
// time, in arrival order, on one context sequence.
//
// Semantics:
//   - Every logprob is the natural log of the softmax, at temperature 1, of
//     llama.cpp's logits over the whole vocabulary at that position, as
//     vLLM reports raw logprobs whatever the sampling temperature.
//   - temperature 0 or absent: greedy decoding (argmax). temperature > 0:
//     sampling from softmax(logits / temperature) over the whole
//     vocabulary (top_p, top_k and the like are ignored), seeded by "seed"
//     when given.
//   - Generation stops at max_tokens ("length") or when the model emits
//     EOS ("stop"; the EOS token is counted and listed in logprobs with the
//     empty string as its text, as vLLM does with skip_special_tokens).
//     "stop" strings are ignored.
//   - A token's text is its vocabulary piece with "▁" as a space and a
//     byte-fallback piece as its byte (a byte that is not whole UTF-8 on
//     its own reads as U+FFFD); control tokens read as "". Generated text is
//     the concatenation of the token texts, with multi-byte characters
//     decoded whole.
//   - Chat template (the same for /tokenize and /v1/chat/completions), with
//     BOS first:
//         "<Role>: <content>\n" per message, Role capitalized
//         ("System", "User", "Assistant", ...), then "Assistant:" when
//         add_generation_prompt is true (the default of chat completions).
//     Content may be a string or an array of {"type":"text","text"} parts.
//   - A string prompt gets BOS first (unless add_special_tokens is false);
//     a prompt given as token ids is evaluated exactly as given.
//   - Errors are OpenAI error bodies {"error":{"message","type","param","code"}}:
//     400 for a bad request, 404 for an unknown model or route.
import http from "node:http";
import {parseArgs} from "node:util";
import {loadLlamaModule, getCPULlama, openModel, evaluate} from "./llama.mjs";

const {values: args} = parseArgs({
    options: {
        model: {type: "string"},
        name: {type: "string"},
        port: {type: "string"},
        host: {type: "string", default: "127.0.0.1"},
        ctx: {type: "string"},
        threads: {type: "string", default: "1"},
    },
});
if (!args.model || !args.port)
    throw new Error("usage: node server.mjs --model PATH --name NAME --port N [--host H] [--ctx N]");
const modelName = args.name || "llamacpp";

const mod = await loadLlamaModule();
const llama = await getCPULlama(mod);
const {model, sequence, contextSize} = await openModel(llama, args.model, args.ctx ? Number(args.ctx) : undefined, Number(args.threads));
const BOS = model.tokens.bos;
const EOS = model.tokens.eos;

// ---- vocabulary: each token's exact bytes and its text ----

const gguf = await mod.readGgufFileInfo(args.model, {readTensorInfo: false});
const vocab = gguf.metadata.tokenizer.ggml;
const CONTROL = 3, BYTE = 6, UNKNOWN = 2;
const tokenBytes = vocab.tokens.map((piece, id) => {
    const type = vocab.token_type?.[id];
    if (type === CONTROL || type === UNKNOWN)
        return Buffer.alloc(0);
    const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(piece);
    if (type === BYTE && m)
        return Buffer.from([parseInt(m[1], 16)]);
    return Buffer.from(piece.replaceAll("\u2581", " "), "utf8");
});
const tokenText = tokenBytes.map((b) => b.toString("utf8"));
const nVocab = tokenBytes.length;

function decode(ids) {
    return Buffer.concat(ids.map((id) => tokenBytes[id] ?? Buffer.alloc(0))).toString("utf8");
}

// ---- HTTP plumbing ----

class APIError extends Error {
    constructor(status, message, param = null) {
        super(message);
        this.status = status;
        this.param = param;
    }
}

const badRequest = (message, param) => new APIError(400, message, param);

function send(res, status, body) {
    const data = JSON.stringify(body);
    res.writeHead(status, {"content-type": "application/json", "content-length": Buffer.byteLength(data)});
    res.end(data);
}

function sendError(res, err) {
    const status = err instanceof APIError ? err.status : 500;
    const type = status === 400 ? "BadRequestError" : status === 404 ? "NotFoundError" : "InternalServerError";
    send(res, status, {error: {message: err.message, type, param: err.param ?? null, code: status}});
}

const maxBody = 8 << 20;

async function readJSON(req) {
    let size = 0;
    const chunks = [];
    for await (const c of req) {
        size += c.length;
        if (size > maxBody)
            throw badRequest("request body too large");
        chunks.push(c);
    }
    try {
        const v = JSON.parse(Buffer.concat(chunks).toString("utf8"));
        if (v === null || typeof v !== "object" || Array.isArray(v))
            throw new Error("not an object");
        return v;
    } catch (e) {
        throw badRequest(`invalid JSON body: ${e.message}`);
    }
}

// One request at a time: the model has one context sequence.
let queue = Promise.resolve();
function serialized(fn) {
    const run = queue.then(fn, fn);
    queue = run.catch(() => {});
    return run;
}

// ---- request fields ----

function checkModel(body) {
    if (body.model != null && body.model !== modelName)
        throw new APIError(404, `The model \`${body.model}\` does not exist.`, "model");
}

function intField(body, name, def, lo, hi) {
    const v = body[name];
    if (v == null)
        return def;
    if (!Number.isInteger(v) || v < lo || v > hi)
        throw badRequest(`${name} must be an integer in [${lo}, ${hi}]`, name);
    return v;
}

function temperatureOf(body) {
    const t = body.temperature ?? 0;
    if (typeof t !== "number" || !(t >= 0))
        throw badRequest("temperature must be a number >= 0", "temperature");
    return t;
}

function checkCommon(body) {
    checkModel(body);
    if (body.stream === true)
        throw badRequest("stream is not supported by this test server", "stream");
    if (body.n != null && body.n !== 1)
        throw badRequest("n must be 1", "n");
}

function tokenize(text, addSpecial) {
    const ids = model.tokenize(text, false);
    return addSpecial ? [BOS, ...ids] : ids;
}

function renderChat(messages, addGenerationPrompt) {
    if (!Array.isArray(messages) || messages.length === 0)
        throw badRequest("messages must be a non-empty array", "messages");
    let s = "";
    for (const [i, m] of messages.entries()) {
        if (m == null || typeof m.role !== "string" || m.role === "")
            throw badRequest(`messages[${i}].role must be a non-empty string`, "messages");
        let content = m.content ?? "";
        if (Array.isArray(content))
            content = content.map((p) => (p?.type === "text" ? String(p.text ?? "") : "")).join("");
        if (typeof content !== "string")
            throw badRequest(`messages[${i}].content must be a string or an array of text parts`, "messages");
        s += m.role[0].toUpperCase() + m.role.slice(1) + ": " + content + "\n";
    }
    if (addGenerationPrompt)
        s += "Assistant:";
    return s;
}

// ---- evaluation ----

// topOf returns the k most likely [id, p] pairs of a distribution (the
// Map node-llama-cpp returns is sorted, most likely first).
function topOf(probs, k) {
    const out = [];
    if (k <= 0)
        return out;
    for (const e of probs) {
        out.push(e);
        if (out.length === k)
            break;
    }
    return out;
}

// rankOf is 1 + the number of tokens strictly more likely than id.
function rankOf(probs, id) {
    const p = probs.get(id) ?? 0;
    let r = 1;
    for (const q of probs.values()) {
        if (q <= p)
            break;
        r++;
    }
    return r;
}

function makeRandom(seed) {
    let s = BigInt.asUintN(64, BigInt(seed ?? Math.floor(Math.random() * 2 ** 52)));
    return () => { // splitmix64
        s = BigInt.asUintN(64, s + 0x9e3779b97f4a7c15n);
        let z = s;
        z = BigInt.asUintN(64, (z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n);
        z = BigInt.asUintN(64, (z ^ (z >> 27n)) * 0x94d049bb133111ebn);
        z ^= z >> 31n;
        return Number(z >> 11n) / 2 ** 53;
    };
}

function sample(probs, temperature, random) {
    let sum = 0;
    const w = [];
    for (const [id, p] of probs) {
        const x = Math.pow(p, 1 / temperature);
        w.push([id, x]);
        sum += x;
    }
    let u = random() * sum;
    for (const [id, x] of w) {
        u -= x;
        if (u <= 0)
            return id;
    }
    return w[w.length - 1][0];
}

// run evaluates prompt (token ids) and generates up to maxTokens tokens.
// It returns the prompt's distributions (index i: the distribution that
// predicts prompt[i], for i ≥ 1) when wantPrompt, and for each generated
// token its id and the distribution it was drawn from.
async function run(prompt, {maxTokens, wantPrompt, temperature, seed}) {
    if (prompt.length === 0)
        throw badRequest("the prompt is empty", "prompt");
    for (const id of prompt) {
        if (!Number.isInteger(id) || id < 0 || id >= nVocab)
            throw badRequest(`token id ${id} is out of the vocabulary [0, ${nVocab})`, "prompt");
    }
    if (prompt.length + maxTokens > contextSize)
        throw badRequest(`This model's maximum context length is ${contextSize} tokens. However, you requested ${prompt.length + maxTokens} tokens (${prompt.length} in the messages, ${maxTokens} in the completion). Please reduce the length of the messages or completion.`);
    await sequence.clearHistory();
    const want = new Set();
    if (wantPrompt) {
        for (let i = 0; i < prompt.length - 1; i++)
            want.add(i);
    }
    if (maxTokens > 0)
        want.add(prompt.length - 1);
    const dists = await evaluate(sequence, prompt, want);
    const promptDists = [null];
    if (wantPrompt) {
        for (let i = 0; i < prompt.length - 1; i++)
            promptDists.push(dists.get(i).probs);
    }
    const generated = [];
    let finish = "length";
    let next = dists.get(prompt.length - 1);
    const random = temperature > 0 ? makeRandom(seed) : null;
    while (generated.length < maxTokens) {
        const id = random ? sample(next.probs, temperature, random) : next.token;
        generated.push({id, probs: next.probs});
        if (id === EOS) {
            finish = "stop";
            break;
        }
        if (generated.length === maxTokens)
            break;
        next = (await evaluate(sequence, [id], new Set([0]))).get(0);
    }
    return {promptDists, generated, finish};
}

const tokenName = (id, asIds) => (asIds ? `token_id:${id}` : tokenText[id]);
const logOf = (p) => Math.log(p);

// ---- routes ----

function handleTokenize(body) {
    checkModel(body);
    const addSpecial = body.add_special_tokens ?? true;
    let ids;
    if (body.messages != null)
        ids = tokenize(renderChat(body.messages, body.add_generation_prompt ?? true), addSpecial);
    else if (typeof body.prompt === "string")
        ids = tokenize(body.prompt, addSpecial);
    else
        throw badRequest("either prompt (a string) or messages is required", "prompt");
    return {count: ids.length, max_model_len: contextSize, tokens: ids};
}

let counter = 0;
const nextID = (prefix) => `${prefix}-${process.pid}-${++counter}`;
const now = () => Math.floor(Date.now() / 1000);

async function handleChat(body) {
    checkCommon(body);
    const maxTokens = intField(body, "max_completion_tokens", null, 1, contextSize) ??
        intField(body, "max_tokens", 16, 1, contextSize);
    const temperature = temperatureOf(body);
    const wantLogprobs = body.logprobs === true;
    const k = intField(body, "top_logprobs", 0, 0, 20);
    if (k > 0 && !wantLogprobs)
        throw badRequest("top_logprobs requires logprobs: true", "top_logprobs");
    const asIds = body.return_tokens_as_token_ids === true;
    const prompt = tokenize(renderChat(body.messages, body.add_generation_prompt ?? true), true);
    const {generated, finish} = await run(prompt, {maxTokens, wantPrompt: false, temperature, seed: body.seed});
    const entry = (id, p) => ({token: tokenName(id, asIds), logprob: logOf(p), bytes: [...tokenBytes[id]]});
    return {
        id: nextID("chatcmpl"),
        object: "chat.completion",
        created: now(),
        model: modelName,
        choices: [{
            index: 0,
            message: {role: "assistant", content: decode(generated.map((g) => g.id))},
            logprobs: wantLogprobs ? {
                content: generated.map((g) => ({
                    ...entry(g.id, g.probs.get(g.id)),
                    top_logprobs: topOf(g.probs, k).map(([id, p]) => entry(id, p)),
                })),
            } : null,
            finish_reason: finish,
        }],
        usage: {prompt_tokens: prompt.length, completion_tokens: generated.length, total_tokens: prompt.length + generated.length},
    };
}

async function handleCompletion(body) {
    checkCommon(body);
    let prompt = body.prompt;
    if (Array.isArray(prompt) && prompt.length === 1 && (typeof prompt[0] === "string" || Array.isArray(prompt[0])))
        prompt = prompt[0]; // a batch of one
    let ids;
    if (typeof prompt === "string")
        ids = tokenize(prompt, body.add_special_tokens ?? true);
    else if (Array.isArray(prompt) && prompt.every((x) => typeof x === "number"))
        ids = prompt;
    else
        throw badRequest("prompt must be a string or an array of token ids (one prompt only)", "prompt");
    const maxTokens = intField(body, "max_tokens", 16, 0, contextSize);
    const temperature = temperatureOf(body);
    const k = body.logprobs == null ? null : intField(body, "logprobs", 0, 0, 20);
    const pk = body.prompt_logprobs == null ? null : intField(body, "prompt_logprobs", 0, 0, 20);
    const echo = body.echo === true;
    const asIds = body.return_tokens_as_token_ids === true;
    const wantPrompt = pk != null || (echo && k != null);
    const {promptDists, generated, finish} = await run(ids, {maxTokens, wantPrompt, temperature, seed: body.seed});

    let logprobs = null;
    if (k != null) {
        const items = []; // [id, distribution or null]
        if (echo)
            ids.forEach((id, i) => items.push([id, promptDists[i]]));
        for (const g of generated)
            items.push([g.id, g.probs]);
        logprobs = {tokens: [], token_logprobs: [], top_logprobs: [], text_offset: []};
        let offset = 0;
        for (const [id, probs] of items) {
            logprobs.tokens.push(tokenName(id, asIds));
            logprobs.text_offset.push(offset);
            offset += tokenText[id].length;
            if (probs == null) {
                logprobs.token_logprobs.push(null);
                logprobs.top_logprobs.push(null);
                continue;
            }
            logprobs.token_logprobs.push(logOf(probs.get(id)));
            const top = {};
            for (const [t, p] of topOf(probs, k))
                top[tokenName(t, asIds)] = logOf(p);
            top[tokenName(id, asIds)] = logOf(probs.get(id));
            logprobs.top_logprobs.push(top);
        }
    }

    let promptLogprobs = null;
    if (pk != null) {
        promptLogprobs = ids.map((id, i) => {
            if (i === 0)
                return null;
            const probs = promptDists[i];
            const o = {};
            o[String(id)] = {logprob: logOf(probs.get(id)), rank: rankOf(probs, id), decoded_token: tokenText[id]};
            topOf(probs, pk).forEach(([t, p], r) => {
                if (t !== id)
                    o[String(t)] = {logprob: logOf(p), rank: r + 1, decoded_token: tokenText[t]};
            });
            return o;
        });
    }

    const text = decode(generated.map((g) => g.id));
    return {
        id: nextID("cmpl"),
        object: "text_completion",
        created: now(),
        model: modelName,
        choices: [{
            index: 0,
            text: echo ? decode(ids) + text : text,
            logprobs,
            finish_reason: maxTokens === 0 ? "length" : finish,
            stop_reason: null,
            prompt_logprobs: promptLogprobs,
        }],
        usage: {prompt_tokens: ids.length, completion_tokens: generated.length, total_tokens: ids.length + generated.length},
    };
}

const routes = {
    "POST /tokenize": handleTokenize,
    "POST /v1/completions": handleCompletion,
    "POST /v1/chat/completions": handleChat,
};

const server = http.createServer(async (req, res) => {
    try {
        const url = new URL(req.url, "http://x");
        if (req.method === "GET" && url.pathname === "/health") {
            res.writeHead(200, {"content-length": 0});
            res.end();
            return;
        }
        if (req.method === "GET" && url.pathname === "/v1/models") {
            send(res, 200, {object: "list", data: [{id: modelName, object: "model", created: now(), owned_by: "llamacpp", max_model_len: contextSize}]});
            return;
        }
        const handler = routes[`${req.method} ${url.pathname}`];
        if (!handler)
            throw new APIError(404, `no route ${req.method} ${url.pathname}`);
        const body = await readJSON(req);
        send(res, 200, await serialized(() => handler(body)));
    } catch (err) {
        if (!(err instanceof APIError))
            console.error(err);
        sendError(res, err);
    }
});

server.listen(Number(args.port), args.host, () => {
    console.log(`llamacpp server: model ${args.model} as ${JSON.stringify(modelName)}, ${nVocab} tokens, context ${contextSize}, listening on http://${args.host}:${args.port}`);
});

async function shutdown() {
    server.close();
    await llama.dispose().catch(() => {});
    process.exit(0);
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
