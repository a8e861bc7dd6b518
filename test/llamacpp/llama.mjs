// Shared helpers of server.mjs and kl.mjs: load node-llama-cpp from the
// install directory and evaluate token sequences with full-vocabulary
// next-token distributions.
//
// node-llama-cpp lives outside the repository (./test/run installs it into
// a cache directory and exports VIGIL_LLAMACPP_DIR): ES modules ignore
// NODE_PATH, so it is imported by absolute path.
import path from "node:path";
import {pathToFileURL} from "node:url";

export async function loadLlamaModule() {
    const dir = process.env.VIGIL_LLAMACPP_DIR;
    if (!dir)
        throw new Error("VIGIL_LLAMACPP_DIR is unset: it names the directory whose node_modules holds node-llama-cpp (./test/run installs it)");
    return import(pathToFileURL(path.join(dir, "node_modules", "node-llama-cpp", "dist", "index.js")).href);
}

// getCPULlama returns a llama.cpp instance that uses the prebuilt CPU
// binary only: tests must not try to build llama.cpp or look for a GPU.
export async function getCPULlama(mod) {
    return mod.getLlama({
        gpu: false,
        build: "never",
        usePrebuiltBinaries: true,
        skipDownload: true,
        progressLogs: false,
        logLevel: mod.LlamaLogLevel.error,
    });
}

// openModel loads a GGUF file and makes a one-sequence context. One
// thread by default: the test models are tiny, and more threads than free
// cores make ggml's spinning workers slow every step down 50-fold (≈200 ms
// instead of ≈3 ms per token with 4 threads on a busy 2-core machine).
export async function openModel(llama, modelPath, contextSize, threads = 1) {
    const model = await llama.loadModel({modelPath, gpuLayers: 0});
    const ctx = contextSize ?? model.trainContextSize;
    const context = await model.createContext({contextSize: ctx, threads, sequences: 1, batchSize: Math.min(512, ctx)});
    return {model, context, sequence: context.getSequence(), contextSize: ctx};
}

// Greedy sampling: llama.cpp's greedy sampler leaves the logits alone, so
// the probabilities node-llama-cpp returns are the softmax (temperature 1)
// of the raw logits over the whole vocabulary, most likely first.
export const greedyNext = {generateNext: {token: true, probabilities: true, options: {temperature: 0}}};

// evaluate appends tokens to the sequence and returns, for each index in
// want (a Set of indexes into tokens), the next-token distribution after
// that token: {token (argmax), probs: Map<id, p> sorted by p}.
export async function evaluate(sequence, tokens, want) {
    const input = tokens.map((t, i) => (want.has(i) ? [t, greedyNext] : t));
    const res = await sequence.controlledEvaluate(input);
    const out = new Map();
    for (const i of want) {
        const next = res[i]?.next;
        if (next?.probabilities == null)
            throw new Error(`no probabilities at position ${i}`);
        out.set(i, {token: next.token, probs: next.probabilities});
    }
    return out;
}
