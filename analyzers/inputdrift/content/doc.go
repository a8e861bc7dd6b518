// Package content is the content part of signal 1, input drift: what
// prompts are about, where the other features read only their shape.
//
// Each prompt becomes a fixed-size set of terms (Doc): of its distinct
// words, the K with the smallest hashes, a random subset of its
// vocabulary that is the same for every prompt, as a min-hash is. A word
// is a run of letters, digits and combining marks, lowercased; each Han,
// Hiragana or Katakana character is a word of its own, as those scripts
// put no space between words; numbers and single Latin letters are read
// but not kept (ids, counts and dates say little of a subject). At most
// MaxWords words of a prompt are read, and at most MaxWordBytes bytes of a
// word hashed, so a prompt costs what its scan costs plus a bounded
// amount, whatever its text, and no allocation.
//
// A window keeps a uniform sample of its prompts' terms (Sample,
// exactly mergeable across replicas) and the terms most prompts contain
// (Terms, a mergeable heavy-hitter sketch). Compare tests a current
// window's sample against the reference's with a held-out linear
// classifier (see Compare) and Explain names the terms whose share rose
// and fell most.
package content
