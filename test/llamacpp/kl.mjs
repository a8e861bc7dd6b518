// kl.mjs compares two GGUF files of the same vocabulary the way llama.cpp
// sees them: every token sequence is evaluated teacher-forced on both
// models, and at every position the full-vocabulary next-token
// distributions are compared.
//
//   echo '{"reference":"f32.gguf","other":"q4_0.gguf","texts":["..."],"token_ids":[[1,5,9]]}' |
//     VIGIL_LLAMACPP_DIR=... node kl.mjs
//
// Texts are tokenized by the reference model with BOS first; token_ids are
// used as given. Prints one JSON object:
//   {"sequences", "positions", "kl_mean", "kl_max", "top1_agreement",
//    "reference_top1_prob_mean", "tokens"}
// kl_mean is the mean over all positions of KL(reference ‖ other) in nats;
// top1_agreement is the share of positions whose argmax tokens agree.
import {loadLlamaModule, getCPULlama, openModel, evaluate} from "./llama.mjs";

let input = "";
for await (const chunk of process.stdin)
    input += chunk;
const req = JSON.parse(input);

const mod = await loadLlamaModule();
const llama = await getCPULlama(mod);
const ref = await openModel(llama, req.reference);
const other = await openModel(llama, req.other);

const seqs = [];
for (const text of req.texts ?? [])
    seqs.push([ref.model.tokens.bos, ...ref.model.tokenize(text)]);
for (const ids of req.token_ids ?? [])
    seqs.push(ids);

let positions = 0, klSum = 0, klMax = 0, agree = 0, top1Sum = 0;
for (const ids of seqs) {
    if (ids.length > ref.contextSize)
        throw new Error(`sequence of ${ids.length} tokens exceeds the context of ${ref.contextSize}`);
    const all = new Set(ids.keys());
    await ref.sequence.clearHistory();
    await other.sequence.clearHistory();
    const p = await evaluate(ref.sequence, ids, all);
    const q = await evaluate(other.sequence, ids, all);
    for (const i of all) {
        const pi = p.get(i), qi = q.get(i);
        let kl = 0;
        for (const [tok, pp] of pi.probs) {
            if (pp > 0)
                kl += pp * (Math.log(pp) - Math.log(qi.probs.get(tok)));
        }
        klSum += kl;
        klMax = Math.max(klMax, kl);
        top1Sum += pi.probs.values().next().value;
        if (pi.token === qi.token)
            agree++;
        positions++;
    }
}

console.log(JSON.stringify({
    sequences: seqs.length,
    positions,
    kl_mean: klSum / positions,
    kl_max: klMax,
    top1_agreement: agree / positions,
    reference_top1_prob_mean: top1Sum / positions,
    tokens: seqs.map((s) => s.length),
}));
await llama.dispose();
